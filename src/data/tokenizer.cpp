// Encoding and decoding with a loaded tokenizer (see tokenizer.h for the pipeline and its reasons;
// tokenizer_load.cpp builds the state from a tokenizer.json).
#include "data/tokenizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "core/error.h"
#include "data/tokenizer_impl.h"
#include "data/utf8.h"

namespace anvil {

std::string Tokenizer::Impl::normalize(std::string_view s) const {
  std::string cur(s);
  if (normalizer_options.empty()) return cur;
  bool ascii = true;
  for (char c : s) ascii = ascii && static_cast<unsigned char>(c) < 0x80;
  if (ascii) return cur;  // every Unicode normal form is the identity on ASCII
  for (int options : normalizer_options) {
    utf8proc_uint8_t* mapped = nullptr;
    const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(cur.data()),
                                            static_cast<utf8proc_ssize_t>(cur.size()), &mapped,
                                            static_cast<utf8proc_option_t>(options));
    ANVIL_ENSURE(n >= 0, kInvalidInput, what, ": normalizer failed: ", utf8proc_errmsg(n));
    cur.assign(reinterpret_cast<const char*>(mapped), static_cast<size_t>(n));
    std::free(mapped);
  }
  return cur;
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  const Impl& t = *impl_;
  const size_t bad = utf8_invalid_at(text);
  ANVIL_ENSURE(bad == std::string_view::npos, kInvalidInput, "tokenizer input is not valid UTF-8 (byte ", bad, ")");
  split_added(text, t.raw_matcher, t.added, [&](std::string_view piece, int32_t index) {
    if (index >= 0) {
      out.push_back(t.added[static_cast<size_t>(index)].id);
      return;
    }
    const std::string normalized = t.normalize(piece);
    split_added(normalized, t.normalized_matcher, t.added, [&](std::string_view p, int32_t k) {
      if (k >= 0) {
        out.push_back(t.added[static_cast<size_t>(k)].id);
        return;
      }
      for (std::string_view word : t.pre_tokenizer.split(p)) t.bpe.encode_word(word, out);
    });
  });
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  std::vector<int32_t> out;
  out.reserve(text.size() / 3 + 4);
  encode_append(text, out);
  return out;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  const Impl& t = *impl_;
  std::string bytes;
  for (int32_t id : ids) {
    ANVIL_ENSURE(id >= 0 && static_cast<size_t>(id) < t.id_used.size() && t.id_used[static_cast<size_t>(id)],
                 kInvalidInput, "decode: id ", id, " is not in the vocabulary of ", t.what);
    auto it = t.added_by_id.find(id);
    if (it != t.added_by_id.end()) {
      if (skip_special_tokens && t.added[static_cast<size_t>(it->second)].special) continue;
      bytes += t.added_decoded[static_cast<size_t>(it->second)];
    } else {
      bytes += t.bpe.vocab.bytes_of(id);
    }
  }
  return utf8_lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto a = impl_->added_by_content.find(std::string(token));
  if (a != impl_->added_by_content.end()) return a->second;
  const int32_t v = impl_->bpe.vocab.find(byte_level_to_bytes(token));
  if (v >= 0) return v;
  return std::nullopt;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  const Impl& t = *impl_;
  ANVIL_ENSURE(id >= 0 && static_cast<size_t>(id) < t.id_used.size() && t.id_used[static_cast<size_t>(id)],
               kInvalidInput, "token id ", id, " is not in the vocabulary of ", t.what);
  auto it = t.added_by_id.find(id);
  if (it != t.added_by_id.end()) return t.added_decoded[static_cast<size_t>(it->second)];
  return t.bpe.vocab.bytes_of(id);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_used.size()); }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }
const std::string& Tokenizer::hash() const { return impl_->hash; }

}  // namespace anvil
