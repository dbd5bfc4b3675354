// fake_cifar, the resize kernel against torchvision, and the loader's determinism.
#include <catch2/catch.hpp>

#include <atomic>
#include <fstream>
#include <set>

#include "data/fake_cifar.hpp"
#include "data/loader.hpp"
#include "data/resize.hpp"
#include "core/errors.hpp"
#include "test_util.hpp"

using namespace ptune::data;

namespace {

struct ResizeCase {
  std::string name;
  int64_t c, ih, iw, oh, ow;
  std::vector<uint8_t> input;
  std::vector<float> float_ref;
  std::vector<int> uint8_ref;
};

std::vector<ResizeCase> read_resize_fixture() {
  std::ifstream in(std::string(PTUNE_TEST_DATA) + "/resize_fixture.txt");
  REQUIRE(in);
  std::vector<ResizeCase> cases;
  std::string word;
  while (in >> word) {
    if (word != "case") continue;
    ResizeCase rc;
    in >> rc.name >> rc.c >> rc.ih >> rc.iw >> rc.oh >> rc.ow;
    const int64_t n_in = rc.c * rc.ih * rc.iw, n_out = rc.c * rc.oh * rc.ow;
    in >> word;  // input
    for (int64_t i = 0; i < n_in; ++i) {
      int v;
      in >> v;
      rc.input.push_back(static_cast<uint8_t>(v));
    }
    in >> word;  // float_ref
    for (int64_t i = 0; i < n_out; ++i) {
      float v;
      in >> v;
      rc.float_ref.push_back(v);
    }
    in >> word;  // uint8_ref
    for (int64_t i = 0; i < n_out; ++i) {
      int v;
      in >> v;
      rc.uint8_ref.push_back(v);
    }
    cases.push_back(std::move(rc));
  }
  return cases;
}

/// A dataset whose sample i is filled with (i * 7 + c) % 251 and labelled i % 10: every batch
/// shows exactly which samples it holds.
class CountingDataset : public Dataset {
 public:
  explicit CountingDataset(int64_t n, int64_t fail_at = -1) : n_(n), fail_at_(fail_at) {}
  int64_t size() const override { return n_; }
  ImageShape shape() const override { return {3, 4, 4}; }
  int64_t get(int64_t index, uint64_t, uint8_t* out) const override {
    if (index == fail_at_) throw ptune::DataError("sample " + std::to_string(index) + ": broken");
    for (int64_t k = 0; k < shape().numel(); ++k) out[k] = static_cast<uint8_t>((index * 7 + k / 16) % 251);
    return index % 10;
  }

 private:
  int64_t n_, fail_at_;
};

std::vector<Batch> one_epoch(std::shared_ptr<const Dataset> ds, LoaderOptions opt, int64_t epoch = 0) {
  Loader loader(std::move(ds), opt);
  loader.start_epoch(epoch);
  std::vector<Batch> out;
  while (auto b = loader.next()) {
    // Clone: the loader recycles buffers once nothing refers to them.
    out.push_back({b->images.clone(), b->labels.clone(), b->index});
  }
  return out;
}

}  // namespace

TEST_CASE("resize matches torchvision's bilinear (float) exactly and its uint8 path within 1",
          "[data][resize]") {
  auto cases = read_resize_fixture();
  REQUIRE(cases.size() == 3);
  for (const auto& rc : cases) {
    INFO("case " << rc.name);
    Resizer r(rc.ih, rc.iw, rc.oh, rc.ow);
    std::vector<float> f(rc.float_ref.size());
    r.run_float(rc.input.data(), rc.c, f.data());
    double max_err = 0;
    for (size_t i = 0; i < f.size(); ++i)
      max_err = std::max(max_err, std::abs(double(f[i]) - rc.float_ref[i]));
    CHECK(max_err < 2e-3);  // float32 arithmetic in a different order
    // torchvision's uint8 kernel works in fixed point; it differs from exact rounding by <= 1.
    std::vector<uint8_t> u(rc.uint8_ref.size());
    r.run(rc.input.data(), rc.c, u.data());
    int worst = 0;
    for (size_t i = 0; i < u.size(); ++i) worst = std::max(worst, std::abs(int(u[i]) - rc.uint8_ref[i]));
    CHECK(worst <= 1);
  }
}

TEST_CASE("loader normalization matches torchvision's ToTensor + Normalize", "[data]") {
  std::ifstream in(std::string(PTUNE_TEST_DATA) + "/normalize_fixture.txt");
  REQUIRE(in);
  std::string w;
  std::array<float, 3> mean{}, std{};
  in >> w >> mean[0] >> mean[1] >> mean[2] >> w >> std[0] >> std[1] >> std[2] >> w;
  std::vector<uint8_t> img(60);
  for (auto& v : img) {
    int x;
    in >> x;
    v = static_cast<uint8_t>(x);
  }
  in >> w;
  std::vector<float> expected(60);
  for (auto& v : expected) in >> v;

  struct One : Dataset {
    std::vector<uint8_t> px;
    int64_t size() const override { return 1; }
    ImageShape shape() const override { return {3, 4, 5}; }
    int64_t get(int64_t, uint64_t, uint8_t* out) const override {
      std::copy(px.begin(), px.end(), out);
      return 0;
    }
  };
  auto ds = std::make_shared<One>();
  ds->px = img;
  LoaderOptions opt;
  opt.batch_size = 1;
  opt.mean = mean;
  opt.std = std;
  auto batches = one_epoch(ds, opt);
  REQUIRE(batches.size() == 1);
  const float* got = batches[0].images.data_ptr<float>();
  for (int i = 0; i < 60; ++i) CHECK(got[i] == Approx(expected[i]).margin(1e-5));
}

TEST_CASE("fake_cifar is deterministic from the seed", "[data]") {
  FakeCifar a(100, 10, 7, 32), b(100, 10, 7, 32), c(100, 10, 8, 32);
  std::vector<uint8_t> x(3072), y(3072), z(3072);
  std::set<int64_t> labels;
  for (int64_t i = 0; i < 100; ++i) {
    int64_t la = a.get(i, 0, x.data());
    CHECK(la == b.get(i, 123, y.data()));
    CHECK(x == y);
    c.get(i, 0, z.data());
    CHECK(x != z);
    CHECK((la >= 0 && la < 10));
    labels.insert(la);
  }
  CHECK(labels.size() == 10);
  FakeCifar big(10, 10, 7, 224);
  CHECK(big.shape().height == 224);
  std::vector<uint8_t> up(3 * 224 * 224), orig(3072);
  big.get(3, 0, up.data());
  a.original(3, orig.data());
  Resizer r(32, 32, 224, 224);
  std::vector<uint8_t> ref(up.size());
  r.run(orig.data(), 3, ref.data());
  CHECK(up == ref);
}

TEST_CASE("epoch order: a permutation per epoch, sharded disjointly across ranks", "[data][loader]") {
  auto e0 = epoch_order(103, true, 1, 0, 0, 1);
  auto e1 = epoch_order(103, true, 1, 1, 0, 1);
  CHECK(e0 != e1);
  CHECK(std::set<int64_t>(e0.begin(), e0.end()).size() == 103);
  CHECK(epoch_order(103, true, 1, 0, 0, 1) == e0);
  CHECK(epoch_order(5, false, 1, 0, 0, 1) == std::vector<int64_t>{0, 1, 2, 3, 4});
  std::set<int64_t> seen;
  for (int64_t r = 0; r < 4; ++r) {
    auto shard = epoch_order(103, true, 1, 2, r, 4);
    CHECK(shard.size() == 25);
    for (auto i : shard) CHECK(seen.insert(i).second);
  }
  CHECK(seen.size() == 100);
  // Uneven shards (evaluation): every sample once, the first 103 % 4 = 3 ranks one more.
  seen.clear();
  for (int64_t r = 0; r < 4; ++r) {
    auto shard = epoch_order(103, true, 1, 2, r, 4, /*even=*/false);
    CHECK(shard.size() == (r < 3 ? 26u : 25u));
    for (auto i : shard) CHECK(seen.insert(i).second);
  }
  CHECK(seen.size() == 103);
}

TEST_CASE("batches are identical for 0, 1 and 3 workers", "[data][loader]") {
  auto ds = std::make_shared<CountingDataset>(103);
  for (bool float_output : {true, false}) {
    LoaderOptions opt;
    opt.batch_size = 8;
    opt.float_output = float_output;
    opt.seed = 42;
    opt.drop_last = false;
    auto ref = one_epoch(ds, opt, 1);
    REQUIRE(ref.size() == 13);
    CHECK(ref.back().labels.size(0) == 7);
    for (int64_t workers : {1, 3}) {
      opt.num_workers = workers;
      opt.prefetch = workers == 3 ? 1 : 4;
      auto got = one_epoch(ds, opt, 1);
      REQUIRE(got.size() == ref.size());
      for (size_t i = 0; i < ref.size(); ++i) {
        CHECK(got[i].index == static_cast<int64_t>(i));
        CHECK(got[i].images.equal(ref[i].images));
        CHECK(got[i].labels.equal(ref[i].labels));
      }
    }
  }
}

/// CountingDataset that counts the threads which built its samples (a thread started anew
/// counts again even if the system reuses its id: thread_local state starts fresh).
class ThreadRecordingDataset : public CountingDataset {
 public:
  using CountingDataset::CountingDataset;
  int64_t get(int64_t index, uint64_t seed, uint8_t* out) const override {
    thread_local const ThreadRecordingDataset* counted_for = nullptr;
    if (counted_for != this) {
      counted_for = this;
      ++threads_;
    }
    return CountingDataset::get(index, seed, out);
  }
  size_t threads() const { return threads_.load(); }

 private:
  mutable std::atomic<size_t> threads_{0};
};

TEST_CASE("workers live across epochs and the batches stay identical for 0, 1 and 3 workers",
          "[data][loader]") {
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.seed = 7;
  opt.drop_last = false;  // 13 batches an epoch: not a multiple of 3 workers
  std::vector<std::vector<Batch>> ref;
  for (int64_t workers : {0, 1, 3}) {
    auto ds = std::make_shared<ThreadRecordingDataset>(103);
    opt.num_workers = workers;
    Loader loader(ds, opt);
    std::vector<std::vector<Batch>> epochs;
    for (int64_t e = 0; e < 3; ++e) {
      loader.start_epoch(e);
      epochs.emplace_back();
      while (auto b = loader.next())
        epochs.back().push_back({b->images.clone(), b->labels.clone(), b->index});
    }
    INFO(workers << " workers");
    // The same threads built all three epochs: none was joined and started again.
    CHECK(ds->threads() == static_cast<size_t>(workers == 0 ? 1 : workers));
    if (ref.empty()) {
      ref = epochs;
      CHECK(!ref[0][0].labels.equal(ref[1][0].labels));  // each epoch reshuffled
      continue;
    }
    for (size_t e = 0; e < 3; ++e) {
      REQUIRE(epochs[e].size() == 13);
      for (size_t i = 0; i < 13; ++i) {
        CHECK(epochs[e][i].index == static_cast<int64_t>(i));
        CHECK(epochs[e][i].images.equal(ref[e][i].images));
        CHECK(epochs[e][i].labels.equal(ref[e][i].labels));
      }
    }
  }
}

TEST_CASE("an epoch left part way, or a jump, restarts the workers at the asked epoch", "[data][loader]") {
  auto ds = std::make_shared<CountingDataset>(64);
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = 3;
  const auto whole = one_epoch(ds, opt, 5);
  Loader loader(ds, opt);
  loader.start_epoch(4);
  REQUIRE(loader.next());  // epoch 4 left after one batch
  loader.start_epoch(5);
  for (const Batch& want : whole) {
    auto b = loader.next();
    REQUIRE(b);
    CHECK(b->labels.equal(want.labels));
  }
  CHECK_FALSE(loader.next());
  loader.start_epoch(9);  // a jump: epoch 6 was being prefetched
  CHECK(loader.next()->labels.equal(one_epoch(ds, opt, 9)[0].labels));
}

TEST_CASE("each epoch is reshuffled, drop_last drops the partial batch", "[data][loader]") {
  auto ds = std::make_shared<CountingDataset>(50);
  LoaderOptions opt;
  opt.batch_size = 8;
  opt.num_workers = 2;
  auto e0 = one_epoch(ds, opt, 0);
  auto e1 = one_epoch(ds, opt, 1);
  CHECK(e0.size() == 6);
  CHECK(!e0[0].labels.equal(e1[0].labels));
  Loader loader(ds, opt);
  CHECK(loader.batches_per_epoch() == 6);
  CHECK(loader.samples_per_epoch() == 48);
}

TEST_CASE("a worker's error reaches the caller", "[data][loader]") {
  auto ds = std::make_shared<CountingDataset>(40, /*fail_at=*/17);
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.shuffle = false;
  opt.num_workers = 2;
  Loader loader(ds, opt);
  loader.start_epoch(0);
  int got = 0;
  CHECK_THROWS_WITH(
      [&] {
        while (loader.next()) ++got;
      }(),
      "sample 17: broken");
  CHECK(got == 4);  // batches 0..3 came before the one holding sample 17
}

TEST_CASE("the loader stops cleanly mid-epoch", "[data][loader]") {
  auto ds = std::make_shared<CountingDataset>(1000);
  LoaderOptions opt;
  opt.batch_size = 4;
  opt.num_workers = 3;
  opt.prefetch = 2;
  for (int round = 0; round < 20; ++round) {
    Loader loader(ds, opt);
    loader.start_epoch(round);
    for (int i = 0; i < round % 5; ++i) REQUIRE(loader.next());
    // Destructor (and a restart) with workers blocked on full queues must not hang.
    if (round % 2) loader.start_epoch(round + 1);
  }
  SUCCEED();
}

TEST_CASE("loader buffers are recycled once released", "[data][loader]") {
  auto ds = std::make_shared<CountingDataset>(64);
  LoaderOptions opt;
  opt.batch_size = 8;
  Loader loader(ds, opt);
  loader.start_epoch(0);
  const void* first = nullptr;
  {
    auto b = loader.next();
    first = b->images.data_ptr();
  }
  auto b2 = loader.next();
  CHECK(b2->images.data_ptr() == first);  // the released buffer came back
  auto b3 = loader.next();
  CHECK(b3->images.data_ptr() != b2->images.data_ptr());  // a held one is never reused
}
