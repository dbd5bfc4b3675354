#include "data/image_folder.hpp"

#include <algorithm>
#include <atomic>
#include <cctype>
#include <filesystem>
#include <mutex>
#include <set>
#include <stdexcept>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "data/decode.hpp"
#include "data/transforms.hpp"
#include "core/errors.hpp"
#include "core/log.hpp"

namespace ptune::data {
namespace fs = std::filesystem;
namespace {

bool is_image_name(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  auto ends_with = [&](const char* ext) {
    const std::string e(ext);
    return lower.size() >= e.size() && lower.compare(lower.size() - e.size(), e.size(), e) == 0;
  };
  return ends_with(".jpg") || ends_with(".jpeg") || ends_with(".png");
}

[[noreturn]] void scan_failed(const fs::path& where, const std::error_code& ec) {
  throw DataError("image_folder: cannot read '" + where.string() + "': " + ec.message());
}

/// Sorted names of the entries of `dir` that are (or are not) folders, following symlinks.
std::vector<std::string> list_dir(const fs::path& dir, bool folders) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec) scan_failed(dir, ec);
  std::vector<std::string> names;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) scan_failed(dir, ec);
    std::error_code ec2;
    const bool is_dir = it->is_directory(ec2);  // follows symlinks; a broken link is a file
    if (is_dir == folders) names.push_back(it->path().filename().string());
  }
  if (ec) scan_failed(dir, ec);
  std::sort(names.begin(), names.end());  // byte order = Python's sorted() on str
  return names;
}

/// The image files under a class folder, in torchvision's order: folders (the class folder
/// and every sub-folder, symlinks followed) sorted by path as `sorted(os.walk(...))`, then
/// file names sorted within each. A symlink back to one of its own ancestors is not followed
/// (os.walk would recurse until the path is too long).
std::vector<std::string> class_files(const fs::path& class_dir) {
  struct Dir {
    std::string path;
    fs::path real;  // canonical path ("" if unknown)
    size_t parent;  // index in `walk`; the root is its own parent
  };
  auto real_path = [](const fs::path& p) {
    std::error_code ec;
    fs::path r = fs::canonical(p, ec);
    return ec ? fs::path() : r;
  };
  std::vector<Dir> walk{{class_dir.string(), real_path(class_dir), 0}};
  for (size_t i = 0; i < walk.size(); ++i)
    for (const std::string& sub : list_dir(walk[i].path, /*folders=*/true)) {
      const fs::path d = fs::path(walk[i].path) / sub;
      const fs::path real = real_path(d);
      bool loop = false;
      for (size_t a = i; !loop && !real.empty(); a = walk[a].parent) {
        loop = walk[a].real == real;
        if (a == 0) break;
      }
      if (!loop) walk.push_back({d.string(), real, i});
    }
  std::vector<std::string> dirs;
  for (const Dir& d : walk) dirs.push_back(d.path);
  std::sort(dirs.begin(), dirs.end());
  std::vector<std::string> files;
  for (const std::string& d : dirs)
    for (const std::string& name : list_dir(d, /*folders=*/false))
      if (is_image_name(name)) files.push_back((fs::path(d) / name).string());
  return files;
}

/// Process-wide memory of check_file()'s verdicts, keyed by path and valid while the file's
/// size and modification time stay the same: a sweep builds the dataset again for every row,
/// and a big folder needs decoding once per process, not once per row.
struct CheckCache {
  struct Entry {
    std::uintmax_t size = 0;
    fs::file_time_type mtime;
    std::string error;
  };
  std::mutex mu;
  std::unordered_map<std::string, Entry> entries;
  std::atomic<int64_t> decodes{0};

  static CheckCache& get() {
    static CheckCache cache;
    return cache;
  }
};

/// Fully decodes `path` (JPEGs at their smallest DCT scale: every coefficient is still
/// entropy-decoded, so corrupt and truncated data are found); "" when it is readable, else
/// "<path>: <reason>".
std::string decode_check(const std::string& path, int64_t max_pixels) {
  CheckCache::get().decodes++;
  try {
    const std::vector<uint8_t> bytes = read_file(path);
    const ImageHeader header = read_header(bytes.data(), bytes.size(), path, max_pixels);
    thread_local RgbImage image;
    decode_rgb(bytes.data(), bytes.size(), header, path, image, 1, 1);
    return "";
  } catch (const DataError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return path + ": " + e.what();
  }
}

/// decode_check(), or its remembered verdict for a file unchanged since.
std::string check_file(const std::string& path, int64_t max_pixels) {
  std::error_code ec;
  const std::uintmax_t size = fs::file_size(path, ec);
  const fs::file_time_type mtime = ec ? fs::file_time_type() : fs::last_write_time(path, ec);
  if (ec) return decode_check(path, max_pixels);  // cannot stat: let the decoder say why
  CheckCache& cache = CheckCache::get();
  const std::string key = path + '\0' + std::to_string(max_pixels);  // the verdict depends on the limit
  {
    std::lock_guard<std::mutex> lock(cache.mu);
    auto it = cache.entries.find(key);
    if (it != cache.entries.end() && it->second.size == size && it->second.mtime == mtime)
      return it->second.error;
  }
  std::string error = decode_check(path, max_pixels);
  std::lock_guard<std::mutex> lock(cache.mu);
  cache.entries[key] = {size, mtime, error};
  return error;
}

/// check_file() on every path, on up to `threads` threads (0 = all cores). With
/// `stop_at_first_error`, paths after the first bad one (in index order) may be left unchecked.
std::vector<std::string> check_files(const std::vector<std::string>& paths, int64_t threads,
                                     bool stop_at_first_error, int64_t max_pixels) {
  std::vector<std::string> errors(paths.size());
  if (threads <= 0) threads = std::max<int64_t>(1, std::thread::hardware_concurrency());
  threads = std::min<int64_t>(threads, static_cast<int64_t>(paths.size()));
  std::atomic<size_t> next{0};
  std::atomic<size_t> first_bad{paths.size()};
  auto work = [&] {
    // Indices are handed out in increasing order, so every index below first_bad is checked.
    for (size_t i = next++; i < paths.size() && i < first_bad; i = next++) {
      errors[i] = check_file(paths[i], max_pixels);
      if (stop_at_first_error && !errors[i].empty()) {
        size_t cur = first_bad;
        while (i < cur && !first_bad.compare_exchange_weak(cur, i)) {
        }
      }
    }
  };
  std::vector<std::thread> pool;
  try {
    for (int64_t t = 1; t < threads; ++t) pool.emplace_back(work);
  } catch (...) {  // could not start a thread: the ones running and this one finish the job
  }
  work();
  for (std::thread& t : pool) t.join();
  return errors;
}

/// Warns once per process for each distinct message: a sweep builds the dataset again for
/// every row, and the same skipped files need saying only once.
void warn_once(const std::string& message) {
  static std::mutex mu;
  static std::set<std::string> said;
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(message).second) log::warn(message);
}

}  // namespace

ImageFolder::ImageFolder(ImageFolderOptions options) : options_(std::move(options)) {
  if (options_.image_size < 1) throw std::invalid_argument("image_folder: image_size must be at least 1");
  const fs::path root(options_.root);
  std::error_code ec;
  const fs::file_status st = fs::status(root, ec);
  if (!fs::exists(st)) throw DataError("image_folder: root folder '" + options_.root + "' does not exist");
  if (!fs::is_directory(st)) throw DataError("image_folder: root '" + options_.root + "' is not a folder");

  classes_ = list_dir(root, /*folders=*/true);
  if (classes_.empty()) throw DataError("image_folder: no class folders under '" + options_.root + "'");

  std::vector<Sample> all;
  for (size_t label = 0; label < classes_.size(); ++label) {
    const fs::path dir = root / classes_[label];
    std::vector<std::string> files = class_files(dir);
    if (files.empty())
      throw DataError("image_folder: class folder '" + dir.string() + "' has no images (.jpg, .jpeg, .png)");
    for (std::string& f : files) all.push_back({std::move(f), static_cast<int64_t>(label)});
  }

  std::vector<std::string> paths;
  paths.reserve(all.size());
  for (const Sample& s : all) paths.push_back(s.path);
  const std::vector<std::string> errors = check_files(
      paths, options_.check_threads, options_.on_bad_file == OnBadFile::kError, options_.max_pixels);

  samples_.reserve(all.size());
  std::string examples;  // the first three skipped paths
  for (size_t i = 0; i < all.size(); ++i) {
    if (errors[i].empty()) {
      samples_.push_back(std::move(all[i]));
      continue;
    }
    if (options_.on_bad_file == OnBadFile::kError) throw DataError(errors[i]);
    if (skipped_.size() < 3) examples += (skipped_.empty() ? "" : ", ") + paths[i];
    skipped_.push_back(errors[i]);
  }
  if (!skipped_.empty()) {
    warn_once("image_folder: skipped " + std::to_string(skipped_.size()) + " unreadable file(s) under " +
              options_.root + ", e.g. " + examples);
    for (const std::string& e : skipped_) log::debug("image_folder: skipped " + e);
  }
  if (samples_.empty()) throw DataError("image_folder: no readable images under '" + options_.root + "'");
}

int64_t ImageFolder::files_decoded_by_checks() { return CheckCache::get().decodes.load(); }

int64_t ImageFolder::get(int64_t index, uint64_t aug_seed, uint8_t* out) const {
  if (index < 0 || index >= size())
    throw std::out_of_range("image_folder: index " + std::to_string(index) + " out of range [0, " +
                            std::to_string(size()) + ")");
  const Sample& s = samples_[static_cast<size_t>(index)];
  load_transformed(s.path, options_.transform, options_.image_size, aug_seed, out, options_.max_pixels);
  return s.label;
}

void load_transformed(const std::string& path, ImageTransform transform, int64_t image_size,
                      uint64_t aug_seed, uint8_t* out, int64_t max_pixels) {
  const int64_t size = image_size;
  const std::vector<uint8_t> bytes = read_file(path);
  const ImageHeader header = read_header(bytes.data(), bytes.size(), path, max_pixels);
  thread_local RgbImage image;

  if (transform == ImageTransform::kTrain) {
    // The crop is chosen on the full-size image (as torchvision does) before decoding, so the
    // JPEG can be decoded just large enough that the crop keeps >= size pixels on each side.
    SplitMix64 rng(aug_seed);
    CropBox box = random_resized_crop_box(header.height, header.width, rng);
    const bool flip = rng.uniform() < 0.5;
    const int64_t min_h = (size * header.height + box.height - 1) / box.height;
    const int64_t min_w = (size * header.width + box.width - 1) / box.width;
    decode_rgb(bytes.data(), bytes.size(), header, path, image, min_h, min_w);
    box = scale_box(box, header.height, header.width, image.height, image.width);
    resized_crop(image, box, size, size, out);
    if (flip) flip_horizontal(out, 3, size, size);
    return;
  }

  // Resize(short side) then CenterCrop, sizes from the full-size image; the JPEG is decoded
  // no smaller than the resized image.
  const auto [rh, rw] = resize_short_side(header.height, header.width, eval_resize_size(size));
  decode_rgb(bytes.data(), bytes.size(), header, path, image, rh, rw);
  const CropBox centre = center_crop_box(rh, rw, size, size);
  thread_local std::vector<uint8_t> resized;
  resized.resize(static_cast<size_t>(3 * rh * rw));
  resized_crop(image, {0, 0, image.height, image.width}, rh, rw, resized.data());
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < size; ++y)
      std::copy_n(resized.data() + (c * rh + centre.top + y) * rw + centre.left, size,
                  out + (c * size + y) * size);
}

}  // namespace ptune::data
