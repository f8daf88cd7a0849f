// Added tokens (tokenizer.json's "added_tokens"): finding them in text before the model sees it.
//
// Tokens are matched leftmost-longest, honouring single_word, lstrip and rstrip as the reference's
// AddedVocabulary does; the text between them goes on through the pipeline. The tokenizer runs
// this twice: for tokens with `normalized` false on the raw text, then for the others on each
// normalized piece.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"
#include "data/utf8.h"

namespace anvil {

// Leftmost-longest matcher over the added tokens of one kind (normalized or not).
class AddedMatcher {
 public:
  void add(int32_t index, const std::string& content) {
    if (content.empty()) return;
    entries_.push_back({index, content});
    first_[static_cast<unsigned char>(content[0])] = true;
  }
  void finish() {
    std::stable_sort(entries_.begin(), entries_.end(),
                     [](const Entry& a, const Entry& b) { return a.content.size() > b.content.size(); });
  }
  bool empty() const { return entries_.empty(); }
  // The longest token that starts at s[i], or -1.
  int32_t match_at(std::string_view s, size_t i, size_t* len) const {
    if (!first_[static_cast<unsigned char>(s[i])]) return -1;
    for (const Entry& e : entries_) {
      if (e.content.size() <= s.size() - i && std::memcmp(s.data() + i, e.content.data(), e.content.size()) == 0) {
        *len = e.content.size();
        return e.index;
      }
    }
    return -1;
  }

 private:
  struct Entry {
    int32_t index;
    std::string content;
  };
  std::vector<Entry> entries_;
  bool first_[256] = {};
};

// A letter, a number or '_' (the reference's word characters for single_word).
bool is_word_char(char32_t c);

// Splits s around the added tokens m finds; emit(piece, added_index) with added_index -1 for
// text between tokens. single_word, lstrip and rstrip follow the reference's AddedVocabulary
// (whitespace as Rust's char::is_whitespace).
template <class Emit>
void split_added(std::string_view s, const AddedMatcher& m, const std::vector<AddedToken>& added, Emit&& emit) {
  if (m.empty()) {
    emit(s, -1);
    return;
  }
  size_t start_offset = 0, i = 0;
  while (i < s.size()) {
    size_t len = 0;
    const int32_t index = m.match_at(s, i, &len);
    if (index < 0) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + len;
    const AddedToken& tok = added[static_cast<size_t>(index)];
    if (tok.single_word) {
      bool start_ok = start == 0, stop_ok = stop == s.size();
      if (!start_ok) {
        size_t k = start;
        start_ok = !is_word_char(utf8_prev(s, k));
      }
      if (!stop_ok) {
        size_t k = stop;
        stop_ok = !is_word_char(utf8_next(s, k));
      }
      if (!start_ok || !stop_ok) {
        i = stop;
        continue;
      }
    }
    if (tok.lstrip) {
      size_t k = start;
      while (k > start_offset) {
        size_t prev = k;
        if (!unicode_white_space(utf8_prev(s, prev))) break;
        k = prev;
      }
      start = k;
    }
    if (tok.rstrip) {
      while (stop < s.size()) {
        size_t next = stop;
        if (!unicode_white_space(utf8_next(s, next))) break;
        stop = next;
      }
    }
    if (start_offset < start) emit(s.substr(start_offset, start - start_offset), -1);
    emit(s.substr(start, stop - start), index);
    start_offset = stop;
    i = stop;
  }
  if (start_offset < s.size()) emit(s.substr(start_offset), -1);
}

}  // namespace anvil
