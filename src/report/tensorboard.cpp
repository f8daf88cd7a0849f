// TensorBoard event files: the TFRecord framing and the Event protobuf (see tensorboard.h).
#include "report/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <ctime>

#include "core/error.h"
#include "core/fs.h"

namespace anvil {
namespace {

std::array<uint32_t, 256> crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82f63b78u : c >> 1;  // Castagnoli, reflected
    t[i] = c;
  }
  return t;
}

// Protobuf wire format: varints, keys (field << 3 | wire type), fixed-width little endian.
void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}

template <class T>
void put_fixed(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little endian on every machine anvil runs on
  out.append(b, sizeof(T));
}

void put_bytes(std::string& out, int field, const std::string& bytes) {
  put_varint(out, static_cast<uint64_t>(field) << 3 | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Event{wall_time, step}: the fields every event opens with.
std::string event_head(int64_t step) {
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string e;
  put_varint(e, 1 << 3 | 1);
  put_fixed(e, now);
  put_varint(e, 2 << 3 | 0);
  put_varint(e, static_cast<uint64_t>(step));
  return e;
}

}  // namespace

uint32_t crc32c(const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xffffffffu;
}

uint32_t masked_crc32c(const void* data, size_t n) {
  const uint32_t c = crc32c(data, n);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir) {
  make_directories(dir);
  char host[256] = "localhost";
  ::gethostname(host, sizeof host - 1);
  path_ = path_join(dir, cat("events.out.tfevents.", static_cast<int64_t>(std::time(nullptr)), ".", host));
  out_.open(path_, std::ios::binary | std::ios::app);
  ANVIL_ENSURE(out_.good(), kIo, path_, ": cannot open for writing (--tensorboard needs a writable folder)");
  std::string first = event_head(0);
  put_bytes(first, 3, "brain.Event:2");
  record(first);
}

void TensorBoardWriter::scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values) {
  std::string summary;
  for (const auto& [tag, v] : values) {
    std::string value;
    put_bytes(value, 1, tag);
    put_varint(value, 2 << 3 | 5);
    put_fixed(value, static_cast<float>(v));
    put_bytes(summary, 1, value);
  }
  std::string event = event_head(step);
  put_bytes(event, 5, summary);
  record(event);
}

void TensorBoardWriter::record(const std::string& event) {
  std::string r;
  put_fixed(r, static_cast<uint64_t>(event.size()));
  put_fixed(r, masked_crc32c(r.data(), 8));
  r += event;
  put_fixed(r, masked_crc32c(event.data(), event.size()));
  out_.write(r.data(), static_cast<std::streamsize>(r.size()));
  out_.flush();
  ANVIL_ENSURE(out_.good(), kIo, path_, ": write failed");
}

}  // namespace anvil
