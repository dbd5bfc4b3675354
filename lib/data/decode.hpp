#pragma once
/// JPEG (libjpeg-turbo's TurboJPEG API) and PNG (libpng) decoding into 8-bit RGB, as Pillow's
/// Image.open(path).convert("RGB") sees the file (torchvision's ImageFolder loader): gray is
/// replicated, palettes are expanded, alpha is dropped (not composited), 16-bit samples keep
/// their high byte, CMYK JPEGs are read as Adobe-inverted and converted with Pillow's formula.
/// JPEGs can be decoded smaller with libjpeg's DCT scaling. Every function is thread-safe.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ptune::data {

enum class ImageFormat { kJpeg, kPng };

/// What a file's header says: its format and full size.
struct ImageHeader {
  ImageFormat format = ImageFormat::kJpeg;
  int64_t height = 0;
  int64_t width = 0;
};

/// An 8-bit RGB image, interleaved (HWC), rows packed.
struct RgbImage {
  int64_t height = 0;
  int64_t width = 0;
  std::vector<uint8_t> pixels;  // height * width * 3
};

/// The most pixels an image may have, by default: Pillow's decompression-bomb limit
/// (Image.MAX_IMAGE_PIXELS = 1 GiB / 4 / 3, about 179 Mpx).
inline constexpr int64_t kMaxImagePixels = 178956970;

/// Reads a whole regular file (a FIFO or a device is refused, never waited on). Throws
/// DataError("<path>: <reason>").
std::vector<uint8_t> read_file(const std::string& path);

/// Parses the header of an encoded image. The format comes from the signature (PNG or JPEG
/// magic bytes); a file with neither goes to the decoder its extension names, so the error
/// is that decoder's. `path` only names the file in errors. An image of more than `max_pixels`
/// pixels is refused from its header, before anything is decoded (a decompression bomb: a
/// small file that would decode to gigabytes). Throws DataError("<path>: <reason>").
ImageHeader read_header(const uint8_t* data, size_t size, const std::string& path,
                        int64_t max_pixels = kMaxImagePixels);

/// The size (height, width) a JPEG of `height` x `width` decodes to with the smallest DCT
/// scaling factor (at most 1) whose output is at least `min_height` x `min_width`; the full
/// size when none is smaller, or when either minimum is 0.
std::pair<int64_t, int64_t> jpeg_scaled_size(int64_t height, int64_t width, int64_t min_height,
                                             int64_t min_width);

/// Decodes into `out` (its buffer is reused). JPEGs use jpeg_scaled_size(..., min_height,
/// min_width), so out may be smaller than the header's size (0: full size); PNGs always decode
/// at full size.
/// Throws DataError("<path>: <decoder's reason>") for a corrupt or truncated file.
void decode_rgb(const uint8_t* data, size_t size, const ImageHeader& header, const std::string& path,
                RgbImage& out, int64_t min_height = 0, int64_t min_width = 0);

/// Reads and fully decodes a file at full size (convenience for tools and tests).
RgbImage decode_file(const std::string& path);

}  // namespace ptune::data
