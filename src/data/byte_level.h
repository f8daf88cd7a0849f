// GPT-2's byte-level mapping, as the ByteLevel pre-tokenizer and decoder of tokenizer.json use it:
// every byte is one printable character, so vocabulary and merge strings spell raw bytes.
// The tokenizer maps its strings back to bytes at load (BPE then runs on raw bytes). Inline: this
// runs on every vocabulary and merge string of a load.
#pragma once

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>

namespace anvil {

// GPT-2's reversible byte <-> printable character table used by ByteLevel.
struct ByteLevelTable {
  static constexpr char32_t kChars = 512;  // every mapped character is below 256 + 68
  char32_t byte_to_char[256];
  int16_t char_to_byte[kChars];             // -1: not a byte-level character
  ByteLevelTable() {
    std::fill(std::begin(char_to_byte), std::end(char_to_byte), int16_t{-1});
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      byte_to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      char_to_byte[byte_to_char[b]] = static_cast<int16_t>(b);
    }
  }
};
inline const ByteLevelTable& byte_level() {
  static const ByteLevelTable table;
  return table;
}

// The ByteLevel decoder's view of one token, appended to out: its characters mapped back to
// bytes, or the token's own UTF-8 when any character is outside the table (as the reference does).
// Every table character is below U+0200, so only one- and two-byte sequences are decoded
// (decoded here rather than through utf8.h, for the same reason).
inline void append_byte_level_bytes(std::string_view token, std::string& out) {
  const auto& t = byte_level();
  const size_t start = out.size();
  size_t i = 0;
  while (i < token.size()) {
    const auto lead = static_cast<unsigned char>(token[i]);
    char32_t c = ByteLevelTable::kChars;  // outside the table unless decoded below
    if (lead < 0x80) {
      c = lead;
      i += 1;
    } else if ((lead & 0xE0) == 0xC0 && i + 1 < token.size()) {
      c = static_cast<char32_t>(((lead & 0x1F) << 6) | (static_cast<unsigned char>(token[i + 1]) & 0x3F));
      i += 2;
    }
    if (c >= ByteLevelTable::kChars || t.char_to_byte[c] < 0) {
      out.resize(start);
      out.append(token);
      return;
    }
    out.push_back(static_cast<char>(t.char_to_byte[c]));
  }
}
inline std::string byte_level_to_bytes(std::string_view token) {
  std::string out;
  append_byte_level_bytes(token, out);
  return out;
}

}  // namespace anvil
