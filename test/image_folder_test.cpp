// image_folder: folder scan and labels as torchvision's ImageFolder, decoding as PIL, the
// train/eval transforms as torchvision's, bad files, and deterministic batches.
// Expected values come from test/data/make_image_fixtures.py (image_folder/reference.txt).
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <torch/torch.h>

#include "config/config.hpp"
#include "data/decode.hpp"
#include "data/image_folder.hpp"
#include "data/loader.hpp"
#include "data/transforms.hpp"
#include "engine/trainer.hpp"
#include "core/errors.hpp"
#include "test_util.hpp"

namespace fs = std::filesystem;
using namespace ptune::data;

namespace {

const std::string kRoot = std::string(PTUNE_TEST_DATA) + "/image_folder";

// JPEG: PIL (Pillow 13, libjpeg-turbo 3.x) and TurboJPEG here (libjpeg-turbo 2.1) both run the
// accurate integer IDCT with smooth chroma upsampling, and agree exactly today (max difference
// 0, DCT-scaled and CMYK included). Another build (IJG libjpeg 9 upsamples differently, a
// SIMD path may round differently) can be off by a level or two: allow 2. PNG is lossless:
// exact. Resizing (Resizer) accumulates in float where torchvision's uint8 kernel and PIL's
// filter use fixed point: they differ from ours by at most 1 level (measured: 1 for both).
constexpr int kJpegTolerance = 2;
constexpr int kResizeTolerance = 1;
constexpr int kPilResizeTolerance = 1;

struct RefImage {
  int64_t height = 0, width = 0;
  std::vector<int> values;
};

struct Reference {
  std::vector<std::string> classes;
  std::vector<std::pair<std::string, int64_t>> samples;
  std::map<std::string, RefImage> decoded;  // HWC
  RefImage draft;                           // HWC, rgb.jpg at 1/4 scale
  struct Eval {
    std::string rel;
    int64_t size;
    std::vector<int> chw;
    std::vector<int> chw_pil;
  };
  std::vector<Eval> evals;
  struct Crop {
    std::string rel;
    CropBox box;
    int64_t size;
    std::vector<int> chw;
  };
  std::vector<Crop> crops;
};

std::vector<int> read_ints(std::istream& in, int64_t n) {
  std::vector<int> v(static_cast<size_t>(n));
  for (int& x : v) in >> x;
  return v;
}

const Reference& reference() {
  static const Reference ref = [] {
    Reference r;
    std::ifstream in(kRoot + "/reference.txt");
    REQUIRE(in);
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream ls(line);
      std::string kind;
      ls >> kind;
      if (kind == "classes") {
        for (std::string c; ls >> c;) r.classes.push_back(c);
        continue;  // the loop ends on a failed read
      } else if (kind == "sample") {
        std::string rel;
        int64_t label;
        ls >> rel >> label;
        r.samples.emplace_back(rel, label);
      } else if (kind == "decode" || kind == "draft") {
        std::string rel;
        RefImage img;
        ls >> rel >> img.height >> img.width;
        img.values = read_ints(ls, img.height * img.width * 3);
        (kind == "decode" ? r.decoded[rel] : r.draft) = img;
      } else if (kind == "eval" || kind == "eval_pil") {
        std::string rel;
        int64_t size;
        ls >> rel >> size;
        std::vector<int> v = read_ints(ls, 3 * size * size);
        if (kind == "eval")
          r.evals.push_back({rel, size, v, {}});
        else
          r.evals.back().chw_pil = v;
      } else if (kind == "crop") {
        Reference::Crop c;
        ls >> c.rel >> c.box.top >> c.box.left >> c.box.height >> c.box.width >> c.size;
        c.chw = read_ints(ls, 3 * c.size * c.size);
        r.crops.push_back(c);
      }
      REQUIRE(!ls.fail());
    }
    return r;
  }();
  return ref;
}

template <class A, class B>
int max_abs_diff(const A& a, const B& b) {
  REQUIRE(a.size() == b.size());
  int d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::abs(int(a[i]) - int(b[i])));
  return d;
}

ImageFolderOptions options(const std::string& root, int64_t size, ImageTransform t,
                           OnBadFile bad = OnBadFile::kError) {
  ImageFolderOptions o;
  o.root = root;
  o.image_size = size;
  o.transform = t;
  o.on_bad_file = bad;
  return o;
}

std::vector<uint8_t> sample(const Dataset& ds, int64_t index, uint64_t seed, int64_t* label = nullptr) {
  std::vector<uint8_t> out(static_cast<size_t>(ds.shape().numel()));
  const int64_t l = ds.get(index, seed, out.data());
  if (label) *label = l;
  return out;
}

/// A scratch folder tree for the bad-file cases, removed at the end.
struct Scratch {
  fs::path root;
  Scratch() {
    char tmpl[] = "/tmp/ptune-image-folder-XXXXXX";
    root = ::mkdtemp(tmpl);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
  std::string path(const std::string& rel) const { return (root / rel).string(); }
  /// Copies fixture `from` (relative to the fixture root) to `rel`, keeping `keep` bytes (all if < 0).
  std::string copy(const std::string& from, const std::string& rel, int64_t keep = -1) const {
    std::ifstream in(kRoot + "/" + from, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    REQUIRE(!bytes.empty());
    if (keep >= 0) bytes.resize(static_cast<size_t>(keep));
    return write(rel, bytes);
  }
  std::string write(const std::string& rel, const std::string& bytes) const {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(path(rel), std::ios::binary) << bytes;
    return path(rel);
  }
  void mkdir(const std::string& rel) const { fs::create_directories(root / rel); }
};

std::string data_error(const ImageFolderOptions& o) {
  try {
    ImageFolder f(o);
  } catch (const ptune::DataError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("image_folder: classes and samples in torchvision's ImageFolder order", "[image_folder]") {
  const Reference& ref = reference();
  ImageFolder f(options(kRoot, 8, ImageTransform::kEval));
  // Byte order: upper case first ("C_alpha" < "a_rgb"), as Python's sorted().
  CHECK(f.classes() == std::vector<std::string>{"C_alpha", "a_rgb", "b_gray"});
  CHECK(f.classes() == ref.classes);
  // notes.txt and the root's reference.txt are not images; sub/nested.png is (ImageFolder walks).
  REQUIRE(f.size() == static_cast<int64_t>(ref.samples.size()));
  REQUIRE(f.size() == 10);
  for (int64_t i = 0; i < f.size(); ++i) {
    INFO("sample " << i);
    CHECK(f.path(i) == kRoot + "/" + ref.samples[i].first);
    CHECK(f.label(i) == ref.samples[i].second);
    int64_t label = -1;
    sample(f, i, 0, &label);
    CHECK(label == ref.samples[i].second);
  }
  CHECK(f.skipped().empty());
  CHECK(f.shape().channels == 3);
  CHECK(f.shape().height == 8);
  CHECK(f.shape().width == 8);
}

TEST_CASE("image_folder: JPEG and PNG decode to PIL's RGB", "[image_folder]") {
  const Reference& ref = reference();
  REQUIRE(ref.decoded.size() == 10);
  for (const auto& [rel, expected] : ref.decoded) {
    INFO(rel);
    const RgbImage img = decode_file(kRoot + "/" + rel);
    REQUIRE(img.height == expected.height);
    REQUIRE(img.width == expected.width);
    const bool jpeg = rel.find(".png") == std::string::npos;
    // RGB, gray, CMYK JPEGs; RGB, gray, gray+alpha, RGBA, palette+tRNS PNGs.
    CHECK(max_abs_diff(img.pixels, expected.values) <= (jpeg ? kJpegTolerance : 0));
  }
}

TEST_CASE("image_folder: JPEG DCT scaling picks the smallest scale that is large enough", "[image_folder]") {
  using P = std::pair<int64_t, int64_t>;
  CHECK(jpeg_scaled_size(30, 40, 0, 0) == P{30, 40});  // 0: full size
  CHECK(jpeg_scaled_size(30, 40, 30, 40) == P{30, 40});
  CHECK(jpeg_scaled_size(30, 40, 60, 80) == P{30, 40});        // never upscaled
  CHECK(jpeg_scaled_size(30, 40, 7, 10) == P{8, 10});          // 1/4: ceil(7.5) x 10
  CHECK(jpeg_scaled_size(30, 40, 16, 21) == P{19, 25});        // 5/8 (1/2 gives 15 rows < 16)
  CHECK(jpeg_scaled_size(30, 40, 1, 1) == P{4, 5});            // 1/8
  CHECK(jpeg_scaled_size(375, 500, 256, 341) == P{282, 375});  // ImageNet-like -> eval 256: 3/4

  // The 1/4-scale decode is libjpeg's, as Pillow's draft mode gets it.
  const Reference& ref = reference();
  const std::string path = kRoot + "/a_rgb/rgb.jpg";
  const std::vector<uint8_t> bytes = read_file(path);
  const ImageHeader header = read_header(bytes.data(), bytes.size(), path);
  CHECK(header.format == ImageFormat::kJpeg);
  CHECK(header.height == 30);
  CHECK(header.width == 40);
  RgbImage img;
  decode_rgb(bytes.data(), bytes.size(), header, path, img, 7, 10);
  REQUIRE(img.height == ref.draft.height);
  REQUIRE(img.width == ref.draft.width);
  CHECK(max_abs_diff(img.pixels, ref.draft.values) <= kJpegTolerance);
}

TEST_CASE("image_folder: eval transform is torchvision's Resize + CenterCrop", "[image_folder]") {
  CHECK(eval_resize_size(224) == 256);
  CHECK(eval_resize_size(13) == 15);  // round(14.86)
  CHECK(eval_resize_size(7) == 8);
  CHECK(resize_short_side(30, 40, 18) == std::pair<int64_t, int64_t>{18, 24});
  CHECK(resize_short_side(20, 16, 9) == std::pair<int64_t, int64_t>{11, 9});  // int(11.25)
  CHECK(center_crop_box(8, 10, 7, 7) == CropBox{0, 2, 7, 7});       // round(0.5) = 0, round(1.5) = 2
  CHECK(center_crop_box(15, 20, 13, 13) == CropBox{1, 4, 13, 13});  // round(3.5) = 4

  const Reference& ref = reference();
  REQUIRE(ref.evals.size() == 4);
  for (const auto& e : ref.evals) {
    INFO(e.rel << " image_size " << e.size);
    std::vector<uint8_t> out(static_cast<size_t>(3 * e.size * e.size));
    load_transformed(kRoot + "/" + e.rel, ImageTransform::kEval, e.size, 123, out.data());
    CHECK(max_abs_diff(out, e.chw) <= kResizeTolerance);         // v2 on the uint8 tensor
    CHECK(max_abs_diff(out, e.chw_pil) <= kPilResizeTolerance);  // Resize on the PIL image
  }
  // The dataset applies the same, whatever the seed.
  ImageFolder f(options(kRoot, 16, ImageTransform::kEval));
  const int64_t rgb_png = 5;
  REQUIRE(f.path(rgb_png) == kRoot + "/a_rgb/rgb.png");
  const std::vector<uint8_t> a = sample(f, rgb_png, 1), b = sample(f, rgb_png, 2);
  CHECK(a == b);
  CHECK(max_abs_diff(a, ref.evals[0].chw) <= kResizeTolerance);
}

TEST_CASE("image_folder: resized crops match torchvision's resized_crop", "[image_folder]") {
  const RgbImage img = decode_file(kRoot + "/a_rgb/rgb.png");
  const Reference& ref = reference();
  REQUIRE(ref.crops.size() == 3);
  for (const auto& c : ref.crops) {
    INFO("box " << c.box.top << " " << c.box.left << " " << c.box.height << "x" << c.box.width << " -> "
                << c.size);
    std::vector<uint8_t> out(static_cast<size_t>(3 * c.size * c.size));
    resized_crop(img, c.box, c.size, c.size, out.data());
    CHECK(max_abs_diff(out, c.chw) <= kResizeTolerance);
  }
}

TEST_CASE("image_folder: RandomResizedCrop samples as torchvision's get_params", "[image_folder]") {
  // Very wide or tall images fail all 10 tries (no crop of scale >= 0.08 with ratio <= 4/3
  // fits): the fallback is the centre crop with the nearest allowed ratio.
  SplitMix64 rng(1);
  CHECK(random_resized_crop_box(10, 1000, rng) == CropBox{0, 493, 10, 13});  // w = round(13.3)
  CHECK(random_resized_crop_box(1000, 10, rng) == CropBox{493, 0, 13, 10});
  CHECK(random_resized_crop_box(10, 12, rng, 2.0, 3.0) == CropBox{0, 0, 10, 12});  // ratio ok: whole

  // Normal images: every crop fits, and its area and ratio are in range (up to rounding).
  for (uint64_t seed = 0; seed < 500; ++seed) {
    SplitMix64 r(seed);
    const CropBox b = random_resized_crop_box(300, 400, r);
    INFO("seed " << seed);
    REQUIRE(b.height >= 1);
    REQUIRE(b.width >= 1);
    REQUIRE(b.top + b.height <= 300);
    REQUIRE(b.left + b.width <= 400);
    const double area = double(b.height) * b.width / (300.0 * 400.0);
    CHECK(area >= 0.075);
    CHECK(area <= 1.0);
    const double ratio = double(b.width) / b.height;
    CHECK(ratio >= 0.74);
    CHECK(ratio <= 1.35);
  }
}

TEST_CASE("image_folder: train transform depends only on aug_seed", "[image_folder]") {
  ImageFolder f(options(kRoot, 12, ImageTransform::kTrain));
  CHECK(f.shape().numel() == 3 * 12 * 12);
  for (int64_t i = 0; i < f.size(); ++i) {
    INFO(f.path(i));
    // Same seed: identical, also from other threads running at the same time.
    const std::vector<uint8_t> a = sample(f, i, 99);
    std::vector<std::vector<uint8_t>> from_threads(3);
    std::vector<std::thread> threads;
    for (size_t t = 0; t < from_threads.size(); ++t)
      threads.emplace_back([&, t] {
        for (int rep = 0; rep < 5; ++rep) from_threads[t] = sample(f, i, 99);
      });
    for (auto& t : threads) t.join();
    for (const auto& b : from_threads) CHECK(a == b);
    // Different seeds: different crops.
    std::set<std::vector<uint8_t>> distinct;
    for (uint64_t seed = 0; seed < 8; ++seed) distinct.insert(sample(f, i, seed));
    CHECK(distinct.size() >= 6);
  }

  // get() is the crop get_params picks from the seed (the rest of the stream decides the
  // flip), resized as torchvision would: rebuild it by hand for the PNG (no DCT scaling).
  const int64_t rgb_png = 5;
  REQUIRE(f.path(rgb_png) == kRoot + "/a_rgb/rgb.png");
  const RgbImage img = decode_file(f.path(rgb_png));
  int flips = 0;
  for (uint64_t seed = 0; seed < 16; ++seed) {
    SplitMix64 rng(seed);
    const CropBox box = random_resized_crop_box(img.height, img.width, rng);
    const bool flip = rng.uniform() < 0.5;
    flips += flip;
    std::vector<uint8_t> expected(static_cast<size_t>(3 * 12 * 12));
    resized_crop(img, box, 12, 12, expected.data());
    if (flip) flip_horizontal(expected.data(), 3, 12, 12);
    CHECK(sample(f, rgb_png, seed) == expected);
  }
  CHECK(flips > 0);
  CHECK(flips < 16);
}

TEST_CASE("image_folder: DCT-scaled JPEG decoding keeps the crop where it was", "[image_folder]") {
  // smooth.jpg, 160x120 smooth gradients: a 16x16 train output lets get() decode it at 1/8 ..
  // 1/2 scale. On gradients any decent low-pass agrees, so the result stays within a few
  // levels of full-size decode + crop + resize: what remains is the crop's edges rounded to
  // the coarser decoded grid (up to half a decoded pixel, i.e. up to 4 source pixels at 1/8,
  // a lot for a 16-pixel output; nothing at 224). A crop misplaced by the scaling would be off
  // by tens of levels.
  const int64_t h = 120, w = 160, out = 16;
  const std::string path = kRoot + "/smooth.jpg";
  const RgbImage full = decode_file(path);
  REQUIRE(full.height == h);
  REQUIRE(full.width == w);
  int scaled = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    INFO("seed " << seed);
    SplitMix64 rng(seed);
    const CropBox box = random_resized_crop_box(h, w, rng);
    const bool flip = rng.uniform() < 0.5;
    scaled +=
        jpeg_scaled_size(h, w, (out * h + box.height - 1) / box.height, (out * w + box.width - 1) / box.width)
            .first < h;
    std::vector<uint8_t> expected(3 * out * out), got(3 * out * out);
    resized_crop(full, box, out, out, expected.data());
    if (flip) flip_horizontal(expected.data(), 3, out, out);
    load_transformed(path, ImageTransform::kTrain, out, seed, got.data());
    double total = 0;
    for (size_t i = 0; i < got.size(); ++i) total += std::abs(int(got[i]) - int(expected[i]));
    CHECK(total / got.size() < 4.0);  // measured: 0.5 .. 3.4, mean 1.2
  }
  CHECK(scaled >= 15);
}

TEST_CASE("image_folder: unreadable files and folders", "[image_folder]") {
  Scratch s;
  const std::string root = s.root.string();
  s.copy("a_rgb/rgb.png", "good/rgb.png");
  s.copy("a_rgb/rgb.jpg", "good/rgb.jpg");
  auto bad = OnBadFile::kError;
  auto skip = OnBadFile::kSkip;

  SECTION("truncated JPEG") {
    const std::string p = s.copy("a_rgb/rgb.jpg", "bad/cut.jpg", 700);  // of 1253 bytes
    CHECK(data_error(options(root, 8, ImageTransform::kTrain, bad)) == p + ": Premature end of JPEG file");
    ImageFolder f(options(root, 8, ImageTransform::kTrain, skip));
    CHECK(f.size() == 2);
    CHECK(f.skipped() == std::vector<std::string>{p + ": Premature end of JPEG file"});
    CHECK(f.classes().size() == 2);  // "bad" keeps its label, with no samples
  }
  SECTION("text file named .jpg") {
    const std::string p = s.write("bad/text.jpg", "hello, not a JPEG\n");
    CHECK(data_error(options(root, 8, ImageTransform::kTrain, bad)) ==
          p + ": Not a JPEG file: starts with 0x68 0x65");
    ImageFolder f(options(root, 8, ImageTransform::kTrain, skip));
    CHECK(f.size() == 2);
    CHECK(f.skipped().size() == 1);
  }
  SECTION("truncated PNG, empty file, text named .png") {
    const std::string cut = s.copy("a_rgb/rgb.png", "bad/a_cut.png", 1500);  // of 3014 bytes
    const std::string empty = s.write("bad/b_empty.png", "");
    const std::string text = s.write("bad/c_text.PNG", "hello, not a PNG\n");
    CHECK(data_error(options(root, 8, ImageTransform::kEval, bad)) ==
          cut + ": unexpected end of file (truncated)");
    ImageFolder f(options(root, 8, ImageTransform::kEval, skip));
    CHECK(f.size() == 2);
    CHECK(f.skipped() == std::vector<std::string>{cut + ": unexpected end of file (truncated)",
                                                  empty + ": empty file", text + ": Not a PNG file"});
    // The good files are all there, in order, with their labels ("bad" = 0, "good" = 1).
    CHECK(f.path(0) == s.path("good/rgb.jpg"));
    CHECK(f.path(1) == s.path("good/rgb.png"));
    CHECK(f.label(0) == 1);
    CHECK(f.label(1) == 1);
  }
  SECTION("libjpeg warnings that leave a whole image are not errors (PIL reads these)") {
    // Two garbage bytes after the APP0 segment: libjpeg warns "Corrupt JPEG data: 2 extraneous
    // bytes before marker 0xdb" and decodes the same pixels. Decoded after a truncated file on
    // the same thread, so the earlier failure's state cannot leak in.
    std::ifstream in(kRoot + "/a_rgb/rgb.jpg", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    REQUIRE(bytes.substr(2, 2) == "\xFF\xE0");
    const size_t app0_end = 4 + (uint8_t(bytes[4]) << 8 | uint8_t(bytes[5]));
    const std::string p =
        s.write("good/extra.jpg", bytes.substr(0, app0_end) + "ab" + bytes.substr(app0_end));
    const std::string cut = s.copy("a_rgb/rgb.jpg", "bad/cut.jpg", 700);
    for (int rep = 0; rep < 2; ++rep) {
      CHECK_THROWS_WITH(decode_file(cut), cut + ": Premature end of JPEG file");
      CHECK(decode_file(p).pixels == decode_file(kRoot + "/a_rgb/rgb.jpg").pixels);
    }
    ImageFolder f(options(root, 8, ImageTransform::kTrain, skip));
    CHECK(f.size() == 3);
    CHECK(f.skipped() == std::vector<std::string>{cut + ": Premature end of JPEG file"});
  }
  SECTION("every file unreadable") {
    fs::remove_all(s.root / "good");
    s.write("bad/text.jpg", "hello");
    CHECK(data_error(options(root, 8, ImageTransform::kTrain, skip)) ==
          "image_folder: no readable images under '" + root + "'");
  }
  SECTION("class folder without images") {
    s.mkdir("empty");
    s.write("empty/readme.txt", "no images here");
    const std::string msg =
        "image_folder: class folder '" + s.path("empty") + "' has no images (.jpg, .jpeg, .png)";
    CHECK(data_error(options(root, 8, ImageTransform::kTrain, bad)) == msg);
    CHECK(data_error(options(root, 8, ImageTransform::kTrain, skip)) == msg);
  }
  SECTION("a symlink back up the class folder is not followed round the loop") {
    s.mkdir("good/sub");
    fs::create_directory_symlink("..", s.root / "good/sub/up");
    ImageFolder f(options(root, 8, ImageTransform::kTrain));
    CHECK(f.size() == 2);
  }
  SECTION("missing root, root that is a file, empty root") {
    CHECK(data_error(options(s.path("nope"), 8, ImageTransform::kTrain, skip)) ==
          "image_folder: root folder '" + s.path("nope") + "' does not exist");
    CHECK(data_error(options(s.path("good/rgb.png"), 8, ImageTransform::kTrain)) ==
          "image_folder: root '" + s.path("good/rgb.png") + "' is not a folder");
    s.mkdir("empty_root");
    s.write("empty_root/loose.png", "files at the root are not classes");
    CHECK(data_error(options(s.path("empty_root"), 8, ImageTransform::kTrain)) ==
          "image_folder: no class folders under '" + s.path("empty_root") + "'");
  }
}

TEST_CASE("image_folder: decompression bombs and lying JPEG headers are bad files", "[image_folder]") {
  Scratch s;
  const std::string root = s.root.string();
  s.copy("a_rgb/rgb.png", "good/rgb.png");  // 40x30
  // A JPEG's size sits in its SOF0 segment: FF C0, length, precision, height, width (big-endian).
  auto jpeg_claiming = [&](const std::string& rel, int height, int width) {
    std::ifstream in(kRoot + "/a_rgb/rgb.jpg", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    const size_t sof = bytes.find("\xFF\xC0");
    REQUIRE(sof != std::string::npos);
    bytes[sof + 5] = static_cast<char>(height >> 8);
    bytes[sof + 6] = static_cast<char>(height & 0xFF);
    bytes[sof + 7] = static_cast<char>(width >> 8);
    bytes[sof + 8] = static_cast<char>(width & 0xFF);
    return s.write(rel, bytes);
  };
  SECTION("a 40x30 image claiming 65500x65500: refused from the header, nothing decoded") {
    const std::string p = jpeg_claiming("bad/bomb.jpg", 65500, 65500);
    CHECK(data_error(options(root, 8, ImageTransform::kTrain)) ==
          p + ": 65500x65500 is 4290250000 pixels, over data.max_image_pixels (178956970): refused as a "
              "possible decompression bomb; raise data.max_image_pixels if the image is real");
  }
  SECTION("a header larger than its data: the data runs out") {
    const std::string p = jpeg_claiming("bad/liar.jpg", 300, 400);
    CHECK(data_error(options(root, 8, ImageTransform::kTrain)) ==
          p + ": Corrupt JPEG data: premature end of data segment");
  }
  SECTION("the limit is configurable and applies to PNG too") {
    auto o = options(root, 8, ImageTransform::kEval);
    o.max_pixels = 1199;
    CHECK(data_error(o) ==
          s.path("good/rgb.png") +
              ": 40x30 is 1200 pixels, over data.max_image_pixels (1199): refused as a possible "
              "decompression bomb; raise data.max_image_pixels if the image is real");
    o.max_pixels = 1200;  // the remembered verdict is per limit
    CHECK(ImageFolder(o).size() == 1);
  }
}

TEST_CASE("image_folder: a folder is decoded once per process, changed files again", "[image_folder]") {
  Scratch s;
  const std::string root = s.root.string();
  s.copy("a_rgb/rgb.png", "good/rgb.png");
  s.copy("a_rgb/rgb.jpg", "good/rgb.jpg");
  const std::string cut = s.copy("a_rgb/rgb.jpg", "bad/cut.jpg", 700);
  const int64_t before = ImageFolder::files_decoded_by_checks();
  ImageFolder first(options(root, 8, ImageTransform::kTrain, OnBadFile::kSkip));
  CHECK(ImageFolder::files_decoded_by_checks() - before == 3);
  // A second dataset on the same folder (the next sweep row) decodes nothing and agrees.
  ImageFolder second(options(root, 8, ImageTransform::kEval, OnBadFile::kSkip));
  CHECK(ImageFolder::files_decoded_by_checks() - before == 3);
  CHECK(second.size() == 2);
  CHECK(second.skipped() == first.skipped());
  CHECK(data_error(options(root, 8, ImageTransform::kTrain, OnBadFile::kError)) ==
        cut + ": Premature end of JPEG file");
  // The truncated file repaired: its size changed, so it is decoded again and now counts.
  s.copy("a_rgb/rgb.jpg", "bad/cut.jpg");
  ImageFolder third(options(root, 8, ImageTransform::kTrain, OnBadFile::kError));
  CHECK(ImageFolder::files_decoded_by_checks() - before == 4);
  CHECK(third.size() == 3);
  CHECK(third.skipped().empty());
}

TEST_CASE("image_folder: loader batches are identical for 0, 1 and 3 workers", "[image_folder]") {
  auto folder = std::make_shared<ImageFolder>(options(kRoot, 8, ImageTransform::kTrain));
  auto run = [&](int64_t workers) {
    LoaderOptions o;
    o.batch_size = 3;
    o.num_workers = workers;
    o.shuffle = true;
    o.drop_last = false;
    o.float_output = false;
    o.seed = 7;
    Loader loader(folder, o);
    std::vector<at::Tensor> out;
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      loader.start_epoch(epoch);
      while (auto b = loader.next()) {
        out.push_back(b->images.clone());
        out.push_back(b->labels.clone());
      }
    }
    return out;
  };
  const std::vector<at::Tensor> ref = run(0);
  REQUIRE(ref.size() == 2 * 2 * 4);           // 2 epochs x 4 batches (10 samples, 3 a batch) x images+labels
  CHECK_FALSE(torch::equal(ref[0], ref[8]));  // epochs differ (order and augmentation)
  for (int64_t workers : {1, 3}) {
    const std::vector<at::Tensor> got = run(workers);
    REQUIRE(got.size() == ref.size());
    for (size_t i = 0; i < ref.size(); ++i) {
      INFO("workers " << workers << " tensor " << i);
      CHECK(torch::equal(got[i], ref[i]));
    }
  }
}

TEST_CASE("image_folder: make_dataset builds it from the config", "[image_folder]") {
  ptune::config::ExperimentConfig cfg;
  cfg.data.kind = ptune::config::DataKind::kImageFolder;
  cfg.data.image_size = 8;
  try {
    ptune::engine::make_dataset(cfg);
    FAIL("no error");
  } catch (const ptune::ConfigError& e) {
    CHECK(std::string(e.what()) == "data.root: required when data.kind is image_folder");
  }
  cfg.data.root = kRoot;
  cfg.data.transform = ptune::config::Transform::kEval;
  auto ds = ptune::engine::make_dataset(cfg);
  CHECK(ds->size() == 10);
  CHECK(ds->shape().height == 8);
  CHECK(sample(*ds, 5, 1) == sample(*ds, 5, 2));  // eval: no randomness

  cfg.model.num_classes = 2;  // 3 class folders
  CHECK_THROWS_AS(ptune::engine::make_dataset(cfg), ptune::ConfigError);
}

TEST_CASE(
    "image_folder: a JPEG cut inside its Huffman table is skipped alone and the good files after it decode",
    "[image_folder]") {
  // rgb.jpg's segments: DHT at 177, 210, 393 and 426; 400 bytes end inside the third table.
  // TurboJPEG leaves its decompressor mid-read after such a file: reused, it failed the good
  // files read after it on the same thread ("Bogus Huffman table definition").
  const auto reference = decode_file(kRoot + "/a_rgb/rgb.jpg").pixels;
  for (int64_t threads : {1, 2}) {
    INFO("check threads " << threads);
    Scratch s;  // one per run: verdicts are remembered per file
    const std::string cut = s.copy("a_rgb/rgb.jpg", "a/img0.jpg", 400);
    for (int i = 1; i <= 6; ++i) s.copy("a_rgb/rgb.jpg", "a/img" + std::to_string(i) + ".jpg");
    s.copy("a_rgb/rgb.png", "b/rgb.png");
    if (threads == 1) {
      for (int rep = 0; rep < 2; ++rep) {
        CHECK_THROWS_WITH(decode_file(cut), Catch::StartsWith(cut + ": "));
        CHECK(decode_file(s.path("a/img1.jpg")).pixels == reference);
      }
    }
    ImageFolderOptions o = options(s.root.string(), 8, ImageTransform::kTrain, OnBadFile::kSkip);
    o.check_threads = threads;
    ImageFolder f(o);
    CHECK(f.size() == 7);
    REQUIRE(f.skipped().size() == 1);
    CHECK(f.skipped()[0].rfind(cut + ": ", 0) == 0);
    for (int64_t i = 0; i < f.size(); ++i) CHECK(f.path(i) != cut);
  }
}

TEST_CASE("image_folder: a FIFO or a device named .jpg is a bad file, never waited on", "[image_folder]") {
  Scratch s;
  s.copy("a_rgb/rgb.jpg", "a/good.jpg");
  const std::string fifo = s.path("a/fifo.jpg"), zero = s.path("a/zero.jpg");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);  // no writer: an open that waited would never return
  fs::create_symlink("/dev/zero", zero);
  CHECK_THROWS_WITH(read_file(fifo), fifo + ": not a regular file (a FIFO, a device or a socket)");
  ImageFolder f(options(s.root.string(), 8, ImageTransform::kTrain, OnBadFile::kSkip));
  CHECK(f.size() == 1);
  CHECK(f.skipped() ==
        std::vector<std::string>{fifo + ": not a regular file (a FIFO, a device or a socket)",
                                 zero + ": not a regular file (a FIFO, a device or a socket)"});
}
