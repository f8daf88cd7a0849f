// The Thrift compact protocol, reading only: just what Parquet's FileMetaData and PageHeader
// need. Unknown fields are skipped, so newer writers' additions are harmless; every error names
// where the metadata is (the footer, or a page header) and raises kInvalidInput.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "core/error.h"

namespace anvil::parquet {

class Thrift {
 public:
  Thrift(const uint8_t* p, const uint8_t* end, std::function<std::string()> where)
      : p_(p), end_(end), where_(std::move(where)) {}
  const uint8_t* pos() const { return p_; }

  uint8_t byte() {
    if (p_ >= end_) fail("truncated");
    return *p_++;
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const uint8_t b = byte();
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint too long");
  }
  int64_t zigzag() {
    const uint64_t v = varint();
    return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1);
  }
  int32_t i32() { return static_cast<int32_t>(zigzag()); }
  std::string_view binary() {
    const uint64_t n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) fail("truncated string");
    std::string_view s(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return s;
  }
  bool bool_field() const { return last_bool_; }  // the value of a bool field just announced

  // Calls f(id, type) for each field; f returns false to skip the field.
  template <class F>
  void read_struct(F&& f) {
    enter();
    int32_t last = 0;
    for (;;) {
      const uint8_t b = byte();
      const int type = b & 0x0f;
      if (type == 0) break;
      const int32_t id = (b >> 4) ? last + (b >> 4) : static_cast<int32_t>(zigzag());
      last = id;
      last_bool_ = type == 1;
      if (!f(id, type)) skip(type, false);
    }
    --depth_;
  }
  // Calls f(element_type) once per element.
  template <class F>
  void read_list(F&& f) {
    enter();
    const uint8_t b = byte();
    uint64_t n = b >> 4;
    if (n == 15) n = varint();
    if (n > static_cast<uint64_t>(end_ - p_)) fail("list longer than its data");
    for (uint64_t i = 0; i < n; ++i) f(b & 0x0f);
    --depth_;
  }
  // Skips a value of compact type `type` (in_list: a list element, where bools take a byte).
  void skip(int type, bool in_list);
  // Reads an i32 field into the target paired with id; false when id has none.
  bool i32_field(int32_t id, std::initializer_list<std::pair<int32_t, int32_t*>> targets) {
    for (const auto& [field, target] : targets)
      if (field == id) {
        *target = i32();
        return true;
      }
    return false;
  }
  [[noreturn]] void fail(const std::string& what) const {
    raise(ErrorKind::kInvalidInput, where_(), ": corrupt metadata (", what, ")");
  }

 private:
  void enter() {
    if (++depth_ > 64) fail("nested too deeply");
  }
  const uint8_t* p_;
  const uint8_t* end_;
  std::function<std::string()> where_;
  bool last_bool_ = false;
  int depth_ = 0;
};

}  // namespace anvil::parquet
