#pragma once
/// image_folder: a dataset of JPEG and PNG files laid out as torchvision's ImageFolder expects,
/// root/<class>/**/*.{jpg,jpeg,png}. Labels are the class folders' indices in sorted name
/// order, samples are ordered as torchvision orders them, so index i is the same image in
/// both. Every file is decoded once at construction, so unreadable ones are known (an error,
/// or skipped) before any batch is built, whatever the number of loader workers. The verdicts
/// are remembered for the life of the process (per path, while size and modification time
/// stay the same), so the datasets of later sweep rows do not decode the folder again.

#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.hpp"
#include "data/decode.hpp"

namespace ptune::data {

/// Which transform get() applies.
enum class ImageTransform {
  kTrain,  ///< RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3)) + horizontal flip (p=0.5)
  kEval,   ///< Resize(round(size * 256 / 224)) + CenterCrop(size)
};

/// What to do with a file that cannot be decoded.
enum class OnBadFile {
  kError,  ///< the constructor throws DataError("<path>: <reason>") for the first one
  kSkip,   ///< leave it out, count it, warn once
};

struct ImageFolderOptions {
  std::string root;          // folder of class folders
  int64_t image_size = 224;  // side of the square images get() writes
  ImageTransform transform = ImageTransform::kTrain;
  OnBadFile on_bad_file = OnBadFile::kError;
  int64_t check_threads = 0;             // threads decoding files at construction; 0 = all cores
  int64_t max_pixels = kMaxImagePixels;  // larger images are bad files (read_header)
};

class ImageFolder : public Dataset {
 public:
  /// Scans and checks the folder. Throws DataError for a missing or empty root, a class folder
  /// without images, a bad file (kError), or no readable file at all.
  explicit ImageFolder(ImageFolderOptions options);

  int64_t size() const override { return static_cast<int64_t>(samples_.size()); }
  ImageShape shape() const override { return {3, options_.image_size, options_.image_size}; }
  /// Decodes and transforms sample `index`; all randomness comes from `aug_seed`.
  int64_t get(int64_t index, uint64_t aug_seed, uint8_t* out) const override;

  /// Class folder names; a label is an index into this list.
  const std::vector<std::string>& classes() const { return classes_; }
  /// File of sample `index` (root joined with its relative path).
  const std::string& path(int64_t index) const { return samples_.at(static_cast<size_t>(index)).path; }
  /// Label of sample `index`.
  int64_t label(int64_t index) const { return samples_.at(static_cast<size_t>(index)).label; }
  /// Files left out as unreadable (kSkip), in index order, each "<path>: <reason>".
  const std::vector<std::string>& skipped() const { return skipped_; }
  /// Files this process has decoded to check them (cache misses), for tests.
  static int64_t files_decoded_by_checks();

 private:
  struct Sample {
    std::string path;
    int64_t label;
  };

  ImageFolderOptions options_;
  std::vector<std::string> classes_;
  std::vector<Sample> samples_;
  std::vector<std::string> skipped_;
};

/// Decodes one file and applies `transform` exactly as ImageFolder::get() does, writing uint8
/// CHW of 3 x image_size x image_size; an image over `max_pixels` is refused from its header.
/// Throws DataError("<path>: <reason>").
void load_transformed(const std::string& path, ImageTransform transform, int64_t image_size,
                      uint64_t aug_seed, uint8_t* out, int64_t max_pixels = kMaxImagePixels);

}  // namespace ptune::data
