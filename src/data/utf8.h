// UTF-8 helpers shared by the tokenizer and the chat-template renderer.
//
// Strings stay UTF-8 bytes everywhere; these helpers walk code points when a semantic needs
// them (Python's str.strip and len, Rust's from_utf8_lossy). Invalid input is reported, never
// guessed at: utf8_valid() says where the first bad byte is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace anvil {

// Byte offset of the first invalid sequence, or npos when s is valid UTF-8.
size_t utf8_invalid_at(std::string_view s);
inline bool utf8_valid(std::string_view s) { return utf8_invalid_at(s) == std::string_view::npos; }

// Decodes the code point at s[i] (s valid UTF-8) and advances i past it.
char32_t utf8_next(std::string_view s, size_t& i);
// Decodes the code point that ends at s[i] (exclusive) and moves i back to its first byte.
char32_t utf8_prev(std::string_view s, size_t& i);
void utf8_append(std::string& out, char32_t cp);
size_t utf8_length(std::string_view s);  // in code points

// Rust's String::from_utf8_lossy: each maximal invalid subpart becomes one U+FFFD.
std::string utf8_lossy(std::string_view bytes);

// Unicode White_Space (what Python's str.strip() and Rust's char::is_whitespace use, less
// Python's extra U+001C..U+001F, which python_isspace adds).
bool unicode_white_space(char32_t c);
bool python_isspace(char32_t c);

}  // namespace anvil
