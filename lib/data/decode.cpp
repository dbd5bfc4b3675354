#include "data/decode.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <csetjmp>
#include <cstdio>
#include <cstring>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <png.h>
#include <turbojpeg.h>

#include "core/errors.hpp"

namespace ptune::data {
namespace {

[[noreturn]] void fail(const std::string& path, const std::string& reason) {
  throw DataError(path + ": " + reason);
}

bool has_png_signature(const uint8_t* data, size_t size) { return size >= 8 && png_sig_cmp(data, 0, 8) == 0; }

bool has_jpeg_signature(const uint8_t* data, size_t size) {
  return size >= 2 && data[0] == 0xFF && data[1] == 0xD8;
}

bool has_png_extension(const std::string& path) {
  if (path.size() < 4) return false;
  std::string ext = path.substr(path.size() - 4);
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext == ".png";
}

// ---------------------------------------------------------------------------------------
// JPEG (TurboJPEG)
// ---------------------------------------------------------------------------------------

/// One TurboJPEG decompressor per thread: handles are not thread-safe, and making one per
/// image would allocate libjpeg's state every time. A handle whose call failed is not reused:
/// TurboJPEG leaves libjpeg's decompressor mid-read after an error (a file cut inside its
/// Huffman tables leaves those tables half-defined), and the next good file read with it
/// would fail too ("Bogus Huffman table definition").
struct Decompressor {
  tjhandle h = nullptr;
  ~Decompressor() { reset(); }
  void reset() {
    if (h) tjDestroy(h);
    h = nullptr;
  }
};

Decompressor& thread_state() {
  thread_local Decompressor d;
  return d;
}

tjhandle thread_decompressor() {
  Decompressor& d = thread_state();
  if (!d.h) d.h = tjInitDecompress();
  if (!d.h)
    throw DataError(std::string("TurboJPEG: cannot create a decompressor: ") + tjGetErrorStr2(nullptr));
  return d.h;
}

/// True when a TurboJPEG call that returned `rc` failed for good. libjpeg's warnings (e.g.
/// "Corrupt JPEG data: 3 extraneous bytes before marker") still give a whole image, and
/// Pillow accepts such files; running out of data does not: "Premature end of JPEG file" (a
/// truncated file, which Pillow refuses too) and "Corrupt JPEG data: premature end of data
/// segment" (the header promises more pixels than the data holds) leave the rest gray.
bool tj_failed(tjhandle tj, int rc) {
  if (rc == 0) return false;
  if (tjGetErrorCode(tj) != TJERR_WARNING) return true;
  const std::string what = tjGetErrorStr2(tj);
  return what.rfind("Premature end of JPEG file", 0) == 0 ||
         what.find("premature end of data segment") != std::string::npos;
}

/// After a TurboJPEG call that returned `rc`: nothing when it succeeded; for a failure
/// (tj_failed), throws DataError "<path>: <TurboJPEG's reason>"; either way after a non-zero
/// `rc` this thread's handle is dropped (a warning may leave it mid-read too).
void check_jpeg(tjhandle tj, int rc, const std::string& path) {
  if (rc == 0) return;
  const bool failed = tj_failed(tj, rc);
  const std::string why = tjGetErrorStr2(tj);
  thread_state().reset();
  if (failed) fail(path, why);
}

const std::vector<tjscalingfactor>& downscaling_factors() {
  // Scaling factors at most 1, largest first (libjpeg-turbo: 1/1, 7/8, 3/4, ..., 1/8).
  static const std::vector<tjscalingfactor> factors = [] {
    int n = 0;
    tjscalingfactor* all = tjGetScalingFactors(&n);
    std::vector<tjscalingfactor> v;
    for (int i = 0; all && i < n; ++i)
      if (all[i].num <= all[i].denom) v.push_back(all[i]);
    std::sort(v.begin(), v.end(), [](const tjscalingfactor& a, const tjscalingfactor& b) {
      return static_cast<int64_t>(a.num) * b.denom > static_cast<int64_t>(b.num) * a.denom;
    });
    if (v.empty()) v.push_back({1, 1});
    return v;
  }();
  return factors;
}

int64_t scaled(int64_t dim, const tjscalingfactor& f) {
  return (dim * f.num + f.denom - 1) / f.denom;  // TJSCALED: ceil(dim * num / denom)
}

ImageHeader jpeg_header(const uint8_t* data, size_t size, const std::string& path, int* colorspace) {
  tjhandle tj = thread_decompressor();
  int w = 0, h = 0, subsamp = 0, cs = 0;
  const int rc = tjDecompressHeader3(tj, data, static_cast<unsigned long>(size), &w, &h, &subsamp, &cs);
  const std::string why = rc != 0 ? tjGetErrorStr2(tj) : "";
  check_jpeg(tj, rc, path);
  if (w <= 0 || h <= 0) fail(path, why.empty() ? "no image size in the JPEG header" : why);
  if (colorspace) *colorspace = cs;
  return {ImageFormat::kJpeg, h, w};
}

/// Pillow's CMYK -> RGB (Convert.c cmyk2rgb) on Adobe-inverted CMYK, the convention Pillow
/// assumes for every CMYK JPEG ("CMYK;I"): stored value s means ink 255 - s.
inline uint8_t cmyk_channel(uint8_t stored_ink, uint8_t stored_k) {
  const int nk = stored_k;  // 255 - k
  const int ink = 255 - stored_ink;
  const int t = ink * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return static_cast<uint8_t>(std::clamp(v, 0, 255));
}

void decode_jpeg(const uint8_t* data, size_t size, const std::string& path, RgbImage& out, int64_t min_height,
                 int64_t min_width) {
  int colorspace = 0;
  const ImageHeader header = jpeg_header(data, size, path, &colorspace);
  const auto [h, w] = jpeg_scaled_size(header.height, header.width, min_height, min_width);
  tjhandle tj = thread_decompressor();
  out.height = h;
  out.width = w;
  out.pixels.resize(static_cast<size_t>(h * w * 3));
  const int flags = TJFLAG_ACCURATEDCT;
  if (colorspace == TJCS_CMYK || colorspace == TJCS_YCCK) {
    // libjpeg cannot convert CMYK to RGB itself: decode the inks, convert as Pillow does.
    thread_local std::vector<uint8_t> cmyk;
    cmyk.resize(static_cast<size_t>(h * w * 4));
    const int rc = tjDecompress2(tj, data, static_cast<unsigned long>(size), cmyk.data(), static_cast<int>(w),
                                 0, static_cast<int>(h), TJPF_CMYK, flags);
    check_jpeg(tj, rc, path);
    for (int64_t i = 0; i < h * w; ++i) {
      const uint8_t* p = cmyk.data() + 4 * i;
      for (int c = 0; c < 3; ++c) out.pixels[3 * i + c] = cmyk_channel(p[c], p[3]);
    }
    return;
  }
  const int rc = tjDecompress2(tj, data, static_cast<unsigned long>(size), out.pixels.data(),
                               static_cast<int>(w), 0, static_cast<int>(h), TJPF_RGB, flags);
  check_jpeg(tj, rc, path);
}

// ---------------------------------------------------------------------------------------
// PNG (libpng)
// ---------------------------------------------------------------------------------------

/// Everything one libpng read needs, owned by the caller of png_run() so that png_run(),
/// which holds the setjmp, has no local objects a longjmp could skip or leave stale.
struct PngJob {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t pos = 0;
  png_structp png = nullptr;
  png_infop info = nullptr;
  bool header_only = false;
  png_uint_32 width = 0, height = 0;
  RgbImage* out = nullptr;
  std::vector<png_bytep> rows;
  char message[256] = "";

  ~PngJob() {
    if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
};

void png_read_memory(png_structp png, png_bytep dst, png_size_t n) {
  auto* job = static_cast<PngJob*>(png_get_io_ptr(png));
  if (n > job->size - job->pos) png_error(png, "unexpected end of file (truncated)");
  std::memcpy(dst, job->data + job->pos, n);
  job->pos += n;
}

void png_on_error(png_structp png, png_const_charp msg) {
  auto* job = static_cast<PngJob*>(png_get_error_ptr(png));
  std::snprintf(job->message, sizeof job->message, "%s", msg);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}  // e.g. "iCCP: known incorrect sRGB profile"

/// Runs libpng on job; false (job.message says why) when libpng reports an error.
bool png_run(PngJob& job) {
  if (setjmp(png_jmpbuf(job.png))) return false;
  png_set_read_fn(job.png, &job, png_read_memory);
  png_read_info(job.png, job.info);
  job.width = png_get_image_width(job.png, job.info);
  job.height = png_get_image_height(job.png, job.info);
  if (job.header_only) return true;

  // To 8-bit RGB as Pillow's convert("RGB"): palette and low bit depths expanded, tRNS and
  // alpha dropped, 16-bit samples cut to their high byte, gray replicated.
  png_set_expand(job.png);
  png_set_strip_16(job.png);
  png_set_strip_alpha(job.png);
  png_set_gray_to_rgb(job.png);
  png_set_interlace_handling(job.png);
  png_read_update_info(job.png, job.info);
  if (png_get_rowbytes(job.png, job.info) != static_cast<png_size_t>(job.width) * 3)
    png_error(job.png, "unsupported pixel layout after conversion to RGB");

  RgbImage& out = *job.out;
  out.height = job.height;
  out.width = job.width;
  out.pixels.resize(static_cast<size_t>(job.height) * job.width * 3);
  job.rows.resize(job.height);
  for (png_uint_32 y = 0; y < job.height; ++y)
    job.rows[y] = out.pixels.data() + static_cast<size_t>(y) * job.width * 3;
  png_read_image(job.png, job.rows.data());
  return true;
}

void png_decode(const uint8_t* data, size_t size, const std::string& path, bool header_only, RgbImage* out,
                ImageHeader* header) {
  PngJob job;
  job.data = data;
  job.size = size;
  job.header_only = header_only;
  job.out = out;
  job.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &job, png_on_error, png_on_warning);
  if (!job.png) fail(path, "libpng: cannot create a reader");
  job.info = png_create_info_struct(job.png);
  if (!job.info) fail(path, "libpng: cannot create a reader");
  if (!png_run(job)) fail(path, job.message);
  if (header)
    *header = {ImageFormat::kPng, static_cast<int64_t>(job.height), static_cast<int64_t>(job.width)};
}

}  // namespace

std::vector<uint8_t> read_file(const std::string& path) {
  // Opened without waiting (a FIFO named .jpg would wait for a writer for ever), then only a
  // regular file is read: a FIFO or a device (a link to /dev/zero) is a bad file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path, std::string("cannot read: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail(path, "not a regular file (a FIFO, a device or a socket)");
  std::vector<uint8_t> bytes(static_cast<size_t>(st.st_size));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::read(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(path, std::string("cannot read: ") + std::strerror(errno));
    if (n == 0) break;  // shorter than it was a moment ago
    done += static_cast<size_t>(n);
  }
  bytes.resize(done);
  return bytes;
}

ImageHeader read_header(const uint8_t* data, size_t size, const std::string& path, int64_t max_pixels) {
  if (size == 0) fail(path, "empty file");
  const bool png =
      has_png_signature(data, size) || (!has_jpeg_signature(data, size) && has_png_extension(path));
  ImageHeader header;
  if (png)
    png_decode(data, size, path, /*header_only=*/true, nullptr, &header);
  else
    header = jpeg_header(data, size, path, nullptr);
  if (header.height * header.width > max_pixels)
    fail(path,
         std::to_string(header.width) + "x" + std::to_string(header.height) + " is " +
             std::to_string(header.height * header.width) + " pixels, over data.max_image_pixels (" +
             std::to_string(max_pixels) +
             "): refused as a possible decompression bomb; raise data.max_image_pixels if the image is real");
  return header;
}

std::pair<int64_t, int64_t> jpeg_scaled_size(int64_t height, int64_t width, int64_t min_height,
                                             int64_t min_width) {
  std::pair<int64_t, int64_t> best{height, width};
  if (min_height <= 0 || min_width <= 0) return best;
  for (const tjscalingfactor& f : downscaling_factors()) {
    const int64_t h = scaled(height, f), w = scaled(width, f);
    if (h < min_height || w < min_width) break;  // smaller factors only get smaller
    best = {h, w};
  }
  return best;
}

void decode_rgb(const uint8_t* data, size_t size, const ImageHeader& header, const std::string& path,
                RgbImage& out, int64_t min_height, int64_t min_width) {
  if (size == 0) fail(path, "empty file");
  if (header.format == ImageFormat::kPng)
    png_decode(data, size, path, /*header_only=*/false, &out, nullptr);
  else
    decode_jpeg(data, size, path, out, min_height, min_width);
}

RgbImage decode_file(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file(path);
  const ImageHeader header = read_header(bytes.data(), bytes.size(), path);
  RgbImage image;
  decode_rgb(bytes.data(), bytes.size(), header, path, image);
  return image;
}

}  // namespace ptune::data
