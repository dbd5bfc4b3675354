#include "models/zip_records.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include <zlib.h>

#include "core/errors.hpp"

namespace ptune::models {
namespace {

/// Little-endian integers out of a byte buffer.
uint64_t le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int k = bytes - 1; k >= 0; --k) v = (v << 8) | p[k];
  return v;
}

/// One record as the zip's central directory describes it.
struct ZipRecord {
  std::string name;
  uint32_t crc = 0;
  uint16_t method = 0;  // 0 stored (torch.save's), 8 deflated
  uint64_t compressed = 0, size = 0, local_offset = 0;
};

/// A file read at offsets; every failure is a DataError naming the file as damaged.
class ArchiveFile {
 public:
  explicit ArchiveFile(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "rb")) {
    if (!f_) throw DataError("cannot open '" + path + "': " + std::strerror(errno));
    std::fseek(f_, 0, SEEK_END);
    size_ = static_cast<uint64_t>(std::max(0L, std::ftell(f_)));
  }
  ~ArchiveFile() { std::fclose(f_); }
  ArchiveFile(const ArchiveFile&) = delete;
  ArchiveFile& operator=(const ArchiveFile&) = delete;
  uint64_t size() const { return size_; }
  [[noreturn]] void damaged(const std::string& why) const {
    throw DataError(path_ + ": a damaged zip archive: " + why);
  }
  /// Reads `n` bytes at `offset` into `out`; a read past the end is damage.
  void read(uint64_t offset, size_t n, unsigned char* out) const {
    if (offset > size_ || n > size_ - offset)
      damaged("a record reaches past the end of the file (truncated?)");
    if (std::fseek(f_, static_cast<long>(offset), SEEK_SET) != 0 || std::fread(out, 1, n, f_) != n)
      damaged("cannot read " + std::to_string(n) + " bytes at offset " + std::to_string(offset));
  }

 private:
  std::string path_;
  std::FILE* f_;
  uint64_t size_ = 0;
};

/// Where the central directory starts and how many records it holds (zip64 when needed).
std::pair<uint64_t, uint64_t> central_directory(const ArchiveFile& f) {
  constexpr uint64_t kEnd = 22;  // end-of-central-directory record, without its comment
  if (f.size() < kEnd) f.damaged("too short for a zip archive");
  const uint64_t tail = std::min<uint64_t>(f.size(), kEnd + 65535);
  std::vector<unsigned char> buf(tail);
  f.read(f.size() - tail, tail, buf.data());
  for (uint64_t i = tail - kEnd + 1; i-- > 0;) {
    const unsigned char* e = buf.data() + i;
    if (le(e, 4) != 0x06054b50) continue;
    uint64_t count = le(e + 10, 2), offset = le(e + 16, 4);
    if ((count == 0xFFFF || offset == 0xFFFFFFFF) && i >= 20 && le(e - 20, 4) == 0x07064b50) {
      unsigned char z[56];  // the zip64 end-of-central-directory record
      f.read(le(e - 20 + 8, 8), sizeof z, z);
      if (le(z, 4) != 0x06064b50) f.damaged("a broken zip64 end record");
      count = le(z + 32, 8);
      offset = le(z + 48, 8);
    }
    return {offset, count};
  }
  f.damaged("no end-of-central-directory record (truncated?)");
}

/// The central directory's records.
std::vector<ZipRecord> zip_records(const ArchiveFile& f) {
  auto [offset, count] = central_directory(f);
  std::vector<ZipRecord> out;
  for (uint64_t k = 0; k < count; ++k) {
    unsigned char h[46];
    f.read(offset, sizeof h, h);
    if (le(h, 4) != 0x02014b50) f.damaged("a broken central directory");
    ZipRecord r;
    r.method = static_cast<uint16_t>(le(h + 10, 2));
    r.crc = static_cast<uint32_t>(le(h + 16, 4));
    r.compressed = le(h + 20, 4);
    r.size = le(h + 24, 4);
    r.local_offset = le(h + 42, 4);
    const size_t name_len = le(h + 28, 2), extra_len = le(h + 30, 2), comment_len = le(h + 32, 2);
    std::vector<unsigned char> var(name_len + extra_len);
    f.read(offset + sizeof h, var.size(), var.data());
    r.name.assign(var.begin(), var.begin() + static_cast<long>(name_len));
    // Zip64: the sizes and offset that did not fit, 8 bytes each, in this order.
    for (size_t x = name_len; x + 4 <= var.size();) {
      const uint64_t id = le(&var[x], 2), len = le(&var[x + 2], 2);
      size_t at = x + 4;
      if (id == 0x0001) {
        for (uint64_t* field : {&r.size, &r.compressed, &r.local_offset})
          if (*field == 0xFFFFFFFF && at + 8 <= x + 4 + len && at + 8 <= var.size())
            *field = le(&var[at], 8), at += 8;
      }
      x += 4 + len;
    }
    out.push_back(r);
    offset += sizeof h + name_len + extra_len + comment_len;
  }
  return out;
}

/// The CRC-32 of a record's bytes (inflated first when deflated); nullopt for another method.
std::optional<uint32_t> record_crc(const ArchiveFile& f, const ZipRecord& r) {
  unsigned char local[30];
  f.read(r.local_offset, sizeof local, local);
  if (le(local, 4) != 0x04034b50)
    f.damaged("record '" + r.name + "' has no local header where the directory says");
  uint64_t at = r.local_offset + sizeof local + le(local + 26, 2) + le(local + 28, 2);
  if (r.method != 0 && r.method != 8) return std::nullopt;
  uLong crc = crc32(0L, Z_NULL, 0);
  z_stream z{};
  if (r.method == 8 && inflateInit2(&z, -MAX_WBITS) != Z_OK)
    f.damaged("cannot inflate record '" + r.name + "'");
  std::vector<unsigned char> in(1u << 20), out(r.method == 8 ? 1u << 20 : 0);
  uint64_t left = r.compressed;
  int status = Z_OK;
  while (left > 0 && status != Z_STREAM_END) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(left, in.size()));
    f.read(at, n, in.data());
    at += n;
    left -= n;
    if (r.method == 0) {
      crc = crc32(crc, in.data(), static_cast<uInt>(n));
      continue;
    }
    z.next_in = in.data();
    z.avail_in = static_cast<uInt>(n);
    do {
      z.next_out = out.data();
      z.avail_out = static_cast<uInt>(out.size());
      status = inflate(&z, Z_NO_FLUSH);
      if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR) break;
      crc = crc32(crc, out.data(), static_cast<uInt>(out.size() - z.avail_out));
    } while (z.avail_out == 0 && status != Z_STREAM_END);
    if (status != Z_OK && status != Z_STREAM_END && status != Z_BUF_ERROR) break;
  }
  if (r.method == 8) inflateEnd(&z);
  return static_cast<uint32_t>(crc);
}

}  // namespace

void verify_records(const std::string& path) {
  const ArchiveFile f(path);
  for (const ZipRecord& r : zip_records(f)) {
    // A writer may record no check (torch.save with compute_crc32 off writes 0).
    if (r.crc == 0) continue;
    const std::optional<uint32_t> crc = record_crc(f, r);
    if (!crc || *crc == r.crc) continue;
    char hex[64];
    std::snprintf(hex, sizeof hex, "stored 0x%08x, read 0x%08x", r.crc, *crc);
    throw DataError(path + ": damaged: record '" + r.name + "' fails its CRC-32 check (" + hex +
                    "): its bytes changed after it was written");
  }
}

}  // namespace ptune::models
