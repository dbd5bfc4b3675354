// libFuzzer target: an image file (JPEG or PNG) through read_header() and decode_rgb() at full
// size and at a DCT-scaled size, as the image_folder dataset decodes it.
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/decode.hpp"
#include "fuzz_util.hpp"

namespace {
// A small data.max_image_pixels, so that the fuzzer does not spend its time (and memory) on
// huge images; the check itself is fuzzed as well.
constexpr int64_t kMaxPixels = 1 << 20;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ptune::fuzz::expect_documented_errors([&] {
    const std::string path = "fuzz.jpg";  // a file with no PNG signature goes to the JPEG decoder
    const ptune::data::ImageHeader header = ptune::data::read_header(data, size, path, kMaxPixels);
    ptune::data::RgbImage image;
    ptune::data::decode_rgb(data, size, header, path, image);
    if (image.pixels.size() != static_cast<size_t>(image.height * image.width * 3)) std::abort();
    // As the eval transform asks for about a third of the image (DCT scaling for JPEGs).
    ptune::data::decode_rgb(data, size, header, path, image, header.height / 3 + 1, header.width / 3 + 1);
    if (image.pixels.size() != static_cast<size_t>(image.height * image.width * 3)) std::abort();
  });
  return 0;
}
