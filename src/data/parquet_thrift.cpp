// Thrift::skip: every compact type, nested lists, maps and structs included (see parquet_thrift.h).
#include "data/parquet_thrift.h"

namespace anvil::parquet {

void Thrift::skip(int type, bool in_list) {
  switch (type) {
    case 1:
    case 2:
      if (in_list) byte();
      return;
    case 3: byte(); return;
    case 4:
    case 5:
    case 6: varint(); return;
    case 7:
      if (end_ - p_ < 8) fail("truncated");
      p_ += 8;
      return;
    case 8: binary(); return;
    case 9:
    case 10: read_list([&](int t) { skip(t, true); }); return;
    case 11: {
      enter();
      const uint64_t n = varint();
      if (n > 0) {
        const uint8_t kv = byte();
        for (uint64_t i = 0; i < n; ++i) {
          skip(kv >> 4, true);
          skip(kv & 0x0f, true);
        }
      }
      --depth_;
      return;
    }
    case 12: read_struct([](int32_t, int) { return false; }); return;
    default: fail(cat("unknown field type ", type));
  }
}

}  // namespace anvil::parquet
