// Byte-level BPE tokenizer loaded from a Hugging Face tokenizer.json.
//
// Encoding follows the `tokenizers` library step by step, because ids must match it exactly:
//   1. added tokens whose `normalized` is false are found in the raw text (leftmost-longest,
//      honouring single_word / lstrip / rstrip);
//   2. each remaining piece is normalized (NFC, NFKC, ... through utf8proc), then added
//      tokens with `normalized` true are found in it;
//   3. pre-tokenizers (Sequence, Split with the file's own regex, ByteLevel) cut each piece
//      into words; the Split regex is Oniguruma syntax and runs on PCRE2 (UTF + UCP, JIT),
//      with \s and \S rewritten to Oniguruma's Unicode White_Space set;
//   4. each word's bytes go through BPE: start from one symbol per byte, repeatedly merge
//      the adjacent pair of lowest merge rank (leftmost first), as the reference's heap does.
// BPE runs on raw bytes: the vocabulary's byte-level strings are mapped back to bytes at load,
// so no per-call character mapping is needed. Words are cached per thread.
// Other model types (WordPiece, Unigram, WordLevel) and unknown pipeline components are
// refused at load with kUnsupported, never approximated.
// Thread safety: every const method may be called from many threads at once.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace anvil {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

class Tokenizer {
 public:
  // path: a tokenizer.json file, or a folder holding one.
  static Tokenizer load(const std::string& path);
  // json_text: the contents of a tokenizer.json; what: its name, for errors.
  static Tokenizer from_json(const std::string& json_text, const std::string& what);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Ids of text without added special tokens (HF: add_special_tokens=False). text must be
  // valid UTF-8 (kInvalidInput otherwise, naming the byte offset).
  std::vector<int32_t> encode(std::string_view text) const;
  void encode_append(std::string_view text, std::vector<int32_t>& out) const;

  // HF decode(ids, skip_special_tokens): pieces joined through the ByteLevel decoder, invalid
  // UTF-8 replaced by U+FFFD. An id outside the vocabulary is kInvalidInput.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;  // model or added token
  // The bytes one id stands for in decoded text (its share of decode()'s output before
  // UTF-8 repair); a token's byte offset in encoded text is the sum over the ids before it.
  std::string_view token_bytes(int32_t id) const;
  int32_t vocab_size() const;  // one past the largest id
  const std::vector<AddedToken>& added_tokens() const;
  // Content hash of the tokenizer.json this was loaded from (cache keys).
  const std::string& hash() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  // text: a tokenizer.json; padded: text is followed by simdjson's padding (no copy needed).
  static Tokenizer parse(std::string_view text, bool padded, const std::string& what);
  std::unique_ptr<Impl> impl_;
};

}  // namespace anvil
