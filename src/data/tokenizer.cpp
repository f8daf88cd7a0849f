// Byte-level BPE from tokenizer.json (see tokenizer.h for the pipeline and its reasons).
#include "data/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <utf8proc.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <deque>
#include <unordered_map>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "data/hash.h"
#include "data/utf8.h"

namespace anvil {

namespace {

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
const ByteLevelTable& byte_level() {
  static const ByteLevelTable table;
  return table;
}

// The ByteLevel decoder's view of one token: its characters mapped back to bytes, or the
// token's own UTF-8 when any character is outside the table (as the reference does).
std::string byte_level_to_bytes(std::string_view token) {
  const auto& t = byte_level();
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    const char32_t c = utf8_next(token, i);
    if (c >= ByteLevelTable::kChars || t.char_to_byte[c] < 0) return std::string(token);
    out.push_back(static_cast<char>(t.char_to_byte[c]));
  }
  return out;
}

// GPT-2's pre-tokenizer regex, used by ByteLevel when use_regex is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Rewrites an Oniguruma pattern for PCRE2. Only \s/\S differ for the patterns tokenizers use:
// Oniguruma's \s is Unicode White_Space; PCRE2's UCP \s also takes U+180E.
std::string onig_to_pcre2(std::string_view p, const std::string& what) {
  static const std::string ws =
      R"(\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000})";
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char d = p[i + 1];
      ++i;
      if (d == 's') out += in_class ? ws : "[" + ws + "]";
      else if (d == 'S' && !in_class) out += "[^" + ws + "]";
      else if (d == 'h' || d == 'H')
        raise(ErrorKind::kUnsupported, what, ": regex escape \\", d, " at offset ", i - 1,
              " (Oniguruma hex-digit class) is not supported");
      else {
        out.push_back(c);
        out.push_back(d);
      }
      continue;
    }
    if (c == '[') {
      if (in_class && i + 1 < p.size() && p[i + 1] == ':') {
        const size_t end = p.find(":]", i + 2);
        ANVIL_ENSURE(end != std::string_view::npos, kInvalidInput, what, ": unterminated POSIX class at offset ", i);
        out.append(p.substr(i, end + 2 - i));
        i = end + 1;
        continue;
      }
      ANVIL_ENSURE(!in_class, kUnsupported, what, ": nested character class at offset ", i,
                   " (Oniguruma set operations) is not supported");
      in_class = true;
      out.push_back(c);
      if (i + 1 < p.size() && p[i + 1] == '^') out.push_back(p[++i]);
      if (i + 1 < p.size() && p[i + 1] == ']') out.push_back(p[++i]);
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out.push_back(c);
  }
  return out;
}

std::string escape_literal(std::string_view s) {
  std::string out = "\\Q";
  for (size_t i = 0; i < s.size(); ++i) {
    if (s.substr(i, 2) == "\\E") {
      out += "\\E\\\\E\\Q";
      ++i;
    } else {
      out.push_back(s[i]);
    }
  }
  return out + "\\E";
}

// A compiled PCRE2 pattern; find_all reports non-overlapping matches left to right, as
// Oniguruma's find_iter does (an empty match advances one character).
class Regex {
 public:
  Regex(const std::string& pattern, const std::string& what) {
    int err = 0;
    PCRE2_SIZE offset = 0;
    code_ = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                          &err, &offset, nullptr);
    if (code_ == nullptr) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(err, msg, sizeof msg);
      raise(ErrorKind::kUnsupported, what, ": pre-tokenizer regex does not compile at offset ", offset, ": ",
            reinterpret_cast<const char*>(msg));
    }
    jit_ = pcre2_jit_compile(code_, PCRE2_JIT_COMPLETE) == 0;
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() { pcre2_code_free(code_); }

  template <class F>
  void find_all(std::string_view s, F&& on_match) const {
    thread_local MatchState st;
    size_t pos = 0;
    while (pos <= s.size()) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
      int rc = jit_ ? pcre2_jit_match(code_, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, st.data, st.context)
                    : pcre2_match(code_, subject, s.size(), pos, PCRE2_NO_UTF_CHECK, st.data, nullptr);
      if (rc == PCRE2_ERROR_NOMATCH) return;
      if (rc < 0) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(rc, msg, sizeof msg);
        raise(ErrorKind::kInternal, "pre-tokenizer regex failed: ", reinterpret_cast<const char*>(msg));
      }
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(st.data);
      const size_t b = ov[0], e = ov[1];
      if (e > b) {
        on_match(b, e);
        pos = e;
      } else {
        if (b >= s.size()) return;
        size_t next = b;
        utf8_next(s, next);
        pos = next;
      }
    }
  }

 private:
  struct MatchState {
    pcre2_match_data* data = pcre2_match_data_create(1, nullptr);
    pcre2_jit_stack* stack = pcre2_jit_stack_create(32 * 1024, 4 * 1024 * 1024, nullptr);
    pcre2_match_context* context = pcre2_match_context_create(nullptr);
    MatchState() { pcre2_jit_stack_assign(context, nullptr, stack); }
    ~MatchState() {
      pcre2_match_context_free(context);
      pcre2_jit_stack_free(stack);
      pcre2_match_data_free(data);
    }
  };
  pcre2_code* code_ = nullptr;
  bool jit_ = false;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  std::unique_ptr<Regex> regex;  // Split, or ByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
};

// Open-addressing map (pair of ids) -> (rank, merged id): the BPE inner loop's only lookup.
class MergeTable {
 public:
  void reserve(size_t n) {
    size_t cap = 16;
    while (cap < n * 2) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
  }
  bool insert(int32_t a, int32_t b, int32_t rank, int32_t merged) {
    const uint64_t key = pack(a, b);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].rank < 0) {
        slots_[i] = Slot{key, rank, merged};
        return true;
      }
      if (slots_[i].key == key) return false;  // keep the first (lowest) rank, as HF
    }
  }
  const std::pair<int32_t, int32_t>* find(int32_t a, int32_t b, std::pair<int32_t, int32_t>* out) const {
    const uint64_t key = pack(a, b);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].rank < 0) return nullptr;
      if (slots_[i].key == key) {
        *out = {slots_[i].rank, slots_[i].merged};
        return out;
      }
    }
  }

 private:
  struct Slot {
    uint64_t key = 0;
    int32_t rank = -1, merged = -1;
  };
  static uint64_t pack(int32_t a, int32_t b) { return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b); }
  size_t slot_of(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

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

bool is_word_char(char32_t c) {
  if (c == '_') return true;
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO) ||
         (cat >= UTF8PROC_CATEGORY_ND && cat <= UTF8PROC_CATEGORY_NO);
}
bool rust_whitespace(char32_t c) { return unicode_white_space(c); }

std::atomic<uint64_t> g_next_tokenizer_uid{1};

}  // namespace

struct Tokenizer::Impl {
  std::string what;
  std::string hash;
  uint64_t uid = g_next_tokenizer_uid.fetch_add(1);

  std::vector<int> normalizer_options;  // utf8proc option sets, applied in order
  std::vector<PreTokenizerStep> pre_tokenizers;

  // Model: ids <-> raw bytes.
  std::unordered_map<std::string, int32_t> vocab;  // raw bytes -> id
  std::vector<std::string> id_bytes;               // id -> raw bytes ("" when unused)
  std::vector<bool> id_used;
  int32_t byte_id[256];
  MergeTable merges;
  bool ignore_merges = false;

  std::vector<AddedToken> added;
  std::unordered_map<int32_t, int32_t> added_by_id;  // id -> index in added
  std::vector<std::string> added_decoded;            // index -> bytes through the decoder
  AddedMatcher raw_matcher, normalized_matcher;
  std::unordered_map<std::string, int32_t> added_by_content;

  std::string normalize(std::string_view s) const;
  template <class Emit>
  void split_added(std::string_view s, const AddedMatcher& m, Emit&& emit) const;
  void pre_tokenize_and_bpe(std::string_view s, std::vector<int32_t>& out) const;
  void bpe(std::string_view word, std::vector<int32_t>& out) const;
  void bpe_uncached(std::string_view word, std::vector<int32_t>& out) const;
};

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

// Splits s around the added tokens m finds; emit(piece, added_index) with added_index -1 for
// text between tokens. single_word, lstrip and rstrip follow the reference's AddedVocabulary.
template <class Emit>
void Tokenizer::Impl::split_added(std::string_view s, const AddedMatcher& m, Emit&& emit) const {
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
        if (!rust_whitespace(utf8_prev(s, prev))) break;
        k = prev;
      }
      start = k;
    }
    if (tok.rstrip) {
      while (stop < s.size()) {
        size_t next = stop;
        if (!rust_whitespace(utf8_next(s, next))) break;
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

void Tokenizer::Impl::pre_tokenize_and_bpe(std::string_view s, std::vector<int32_t>& out) const {
  thread_local std::vector<std::string_view> cur, next;
  thread_local std::deque<std::string> arena;  // pieces that a prefix space made new
  thread_local std::vector<std::pair<std::pair<size_t, size_t>, bool>> spans;
  cur.clear();
  arena.clear();
  if (!s.empty()) cur.push_back(s);
  for (const PreTokenizerStep& step : pre_tokenizers) {
    next.clear();
    for (std::string_view piece : cur) {
      std::string_view p = piece;
      if (step.add_prefix_space && p[0] != ' ') {
        arena.push_back(" " + std::string(p));
        p = arena.back();
      }
      if (!step.regex) {
        next.push_back(p);
        continue;
      }
      spans.clear();
      size_t prev = 0;
      step.regex->find_all(p, [&](size_t b, size_t e) {
        if (prev != b) spans.push_back({{prev, b}, step.invert});
        spans.push_back({{b, e}, !step.invert});
        prev = e;
      });
      if (prev != p.size()) spans.push_back({{prev, p.size()}, step.invert});
      const size_t first = next.size();
      auto push = [&](size_t b, size_t e) { next.push_back(p.substr(b, e - b)); };
      switch (step.behavior) {
        case SplitBehavior::kIsolated:
          for (auto& [r, m] : spans) push(r.first, r.second);
          break;
        case SplitBehavior::kRemoved:
          for (auto& [r, m] : spans)
            if (!m) push(r.first, r.second);
          break;
        case SplitBehavior::kMergedWithPrevious: {
          bool prev_match = false;
          for (auto& [r, m] : spans) {
            if (m && !prev_match && next.size() > first) next.back() = p.substr(next.back().data() - p.data(), r.second - static_cast<size_t>(next.back().data() - p.data()));
            else push(r.first, r.second);
            prev_match = m;
          }
          break;
        }
        case SplitBehavior::kMergedWithNext: {
          bool prev_match = false;
          std::vector<std::pair<size_t, size_t>> rev;
          for (size_t k = spans.size(); k-- > 0;) {
            auto [r, m] = spans[k];
            if (m && !prev_match && !rev.empty()) rev.back().first = r.first;
            else rev.push_back(r);
            prev_match = m;
          }
          for (size_t k = rev.size(); k-- > 0;) push(rev[k].first, rev[k].second);
          break;
        }
        case SplitBehavior::kContiguous: {
          bool prev_match = false, any = false;
          for (auto& [r, m] : spans) {
            if (any && m == prev_match) next.back() = p.substr(next.back().data() - p.data(), r.second - static_cast<size_t>(next.back().data() - p.data()));
            else push(r.first, r.second);
            any = true;
            prev_match = m;
          }
          break;
        }
      }
      // The reference drops empty pieces after every split.
      next.erase(std::remove_if(next.begin() + static_cast<std::ptrdiff_t>(first), next.end(),
                                [](std::string_view v) { return v.empty(); }),
                 next.end());
    }
    std::swap(cur, next);
  }
  for (std::string_view word : cur) bpe(word, out);
}

void Tokenizer::Impl::bpe(std::string_view word, std::vector<int32_t>& out) const {
  constexpr size_t kMaxCachedWord = 256, kMaxCacheEntries = 1 << 18;
  struct Cache {
    uint64_t owner = 0;
    std::unordered_map<std::string, std::vector<int32_t>> words;
  };
  thread_local Cache cache;
  if (word.size() > kMaxCachedWord) {
    bpe_uncached(word, out);
    return;
  }
  if (cache.owner != uid) {
    cache.words.clear();
    cache.owner = uid;
  }
  thread_local std::string key;
  key.assign(word);
  auto it = cache.words.find(key);
  if (it != cache.words.end()) {
    out.insert(out.end(), it->second.begin(), it->second.end());
    return;
  }
  const size_t before = out.size();
  bpe_uncached(word, out);
  if (cache.words.size() >= kMaxCacheEntries) cache.words.clear();
  cache.words.emplace(key, std::vector<int32_t>(out.begin() + static_cast<std::ptrdiff_t>(before), out.end()));
}

void Tokenizer::Impl::bpe_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges) {
    auto it = vocab.find(std::string(word));
    if (it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  }
  struct Symbol {
    int32_t id, prev, next;
  };
  struct Candidate {
    int32_t rank, pos, left, right;
  };
  thread_local std::vector<Symbol> sym;
  thread_local std::vector<Candidate> heap;
  sym.clear();
  heap.clear();
  for (char c : word) {
    const int32_t id = byte_id[static_cast<unsigned char>(c)];
    if (id < 0) continue;  // a byte outside the vocabulary is dropped (no unk token)
    const auto n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, -1});
    if (n > 0) sym[static_cast<size_t>(n - 1)].next = n;
  }
  // Min-heap on (rank, position): the lowest rank first, leftmost among equals.
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank != b.rank ? a.rank > b.rank : a.pos > b.pos;
  };
  std::pair<int32_t, int32_t> hit;
  const auto consider = [&](int32_t pos) {
    if (pos < 0) return;
    const Symbol& l = sym[static_cast<size_t>(pos)];
    if (l.next < 0) return;
    const Symbol& r = sym[static_cast<size_t>(l.next)];
    if (merges.find(l.id, r.id, &hit)) {
      heap.push_back({hit.first, pos, l.id, r.id});
      std::push_heap(heap.begin(), heap.end(), later);
    }
  };
  for (int32_t k = 0; k + 1 < static_cast<int32_t>(sym.size()); ++k) consider(k);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), later);
    const Candidate c = heap.back();
    heap.pop_back();
    Symbol& l = sym[static_cast<size_t>(c.pos)];
    if (l.id != c.left || l.next < 0) continue;
    Symbol& r = sym[static_cast<size_t>(l.next)];
    if (r.id != c.right) continue;
    merges.find(l.id, r.id, &hit);
    l.id = hit.second;
    r.id = -1;
    l.next = r.next;
    if (r.next >= 0) sym[static_cast<size_t>(r.next)].prev = c.pos;
    consider(l.prev);
    consider(c.pos);
  }
  for (int32_t k = sym.empty() ? -1 : 0; k >= 0; k = sym[static_cast<size_t>(k)].next)
    out.push_back(sym[static_cast<size_t>(k)].id);
}

namespace {

int normal_form_options(const std::string& type) {
  const int base = UTF8PROC_STABLE;
  if (type == "NFC") return base | UTF8PROC_COMPOSE;
  if (type == "NFD") return base | UTF8PROC_DECOMPOSE;
  if (type == "NFKC") return base | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  if (type == "NFKD") return base | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  return -1;
}

void load_normalizer(const Json& j, const std::string& what, std::vector<int>& options_out) {
  if (j.is_null()) return;
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const Json& n : j.at("normalizers")) load_normalizer(n, what, options_out);
    return;
  }
  const int options = normal_form_options(type);
  ANVIL_ENSURE(options >= 0, kUnsupported, what, ": normalizer '", type,
               "' is not supported (anvil handles NFC, NFD, NFKC, NFKD and Sequence of them)");
  options_out.push_back(options);
}

void load_pre_tokenizer(const Json& j, const std::string& what, std::vector<PreTokenizerStep>& steps) {
  if (j.is_null()) return;
  const std::string type = j.value("type", "");
  if (type == "Sequence") {
    for (const Json& p : j.at("pretokenizers")) load_pre_tokenizer(p, what, steps);
    return;
  }
  PreTokenizerStep step;
  if (type == "Split") {
    const Json& pat = j.at("pattern");
    std::string pattern;
    if (pat.contains("Regex")) pattern = onig_to_pcre2(pat.at("Regex").get<std::string>(), what);
    else if (pat.contains("String")) pattern = escape_literal(pat.at("String").get<std::string>());
    else raise(ErrorKind::kInvalidInput, what, ": Split pre-tokenizer has no Regex or String pattern");
    step.regex = std::make_unique<Regex>(pattern, what);
    const std::string behavior = j.value("behavior", "Isolated");
    if (behavior == "Isolated") step.behavior = SplitBehavior::kIsolated;
    else if (behavior == "Removed") step.behavior = SplitBehavior::kRemoved;
    else if (behavior == "MergedWithPrevious") step.behavior = SplitBehavior::kMergedWithPrevious;
    else if (behavior == "MergedWithNext") step.behavior = SplitBehavior::kMergedWithNext;
    else if (behavior == "Contiguous") step.behavior = SplitBehavior::kContiguous;
    else raise(ErrorKind::kUnsupported, what, ": Split behavior '", behavior, "' is not supported");
    step.invert = j.value("invert", false);
  } else if (type == "ByteLevel") {
    step.add_prefix_space = j.value("add_prefix_space", false);
    if (j.value("use_regex", true)) step.regex = std::make_unique<Regex>(onig_to_pcre2(kGpt2Pattern, what), what);
  } else {
    raise(ErrorKind::kUnsupported, what, ": pre-tokenizer '", type,
          "' is not supported (anvil handles Split, ByteLevel and Sequence of them)");
  }
  steps.push_back(std::move(step));
}

void require_byte_level_decoder(const Json& j, const std::string& what) {
  const std::string type = j.is_null() ? "none" : j.value("type", "");
  ANVIL_ENSURE(type == "ByteLevel", kUnsupported, what, ": decoder '", type,
               "' is not supported (anvil handles byte-level BPE with the ByteLevel decoder)");
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  const std::string file = is_directory(path) ? path_join(path, "tokenizer.json") : path;
  ANVIL_ENSURE(path_exists(file), kNotFound, file, ": no tokenizer.json (pass --tokenizer a model folder or the file)");
  return from_json(read_file(file), file);
}

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& what) {
  auto t = std::make_unique<Impl>();
  t->what = what;
  t->hash = hash_hex(json_text);
  const Json j = json_parse(json_text, what);
  const Json& model = j.at("model");
  const std::string type = model.value("type", "");
  ANVIL_ENSURE(type == "BPE", kUnsupported, what, ": tokenizer model type '", type,
               "' is not supported; anvil handles byte-level BPE (Qwen2/2.5/3, Llama 3)");
  ANVIL_ENSURE(!model.value("byte_fallback", false), kUnsupported, what,
               ": BPE with byte_fallback (SentencePiece style) is not supported; anvil handles byte-level BPE");
  ANVIL_ENSURE(model.value("dropout", Json()).is_null(), kUnsupported, what, ": BPE dropout is not supported");
  ANVIL_ENSURE(model.value("continuing_subword_prefix", Json("")).is_null() ||
                   model.value("continuing_subword_prefix", std::string()).empty(),
               kUnsupported, what, ": BPE continuing_subword_prefix is not supported");
  ANVIL_ENSURE(model.value("end_of_word_suffix", Json("")).is_null() ||
                   model.value("end_of_word_suffix", std::string()).empty(),
               kUnsupported, what, ": BPE end_of_word_suffix is not supported");
  t->ignore_merges = model.value("ignore_merges", false);
  require_byte_level_decoder(j.value("decoder", Json()), what);
  load_normalizer(j.value("normalizer", Json()), what, t->normalizer_options);
  load_pre_tokenizer(j.value("pre_tokenizer", Json()), what, t->pre_tokenizers);

  const Json& vocab = model.at("vocab");
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) max_id = std::max(max_id, it.value().get<int32_t>());
  for (const Json& a : j.value("added_tokens", Json::array())) max_id = std::max(max_id, a.at("id").get<int32_t>());
  t->id_bytes.assign(static_cast<size_t>(max_id + 1), std::string());
  t->id_used.assign(static_cast<size_t>(max_id + 1), false);
  t->vocab.reserve(vocab.size());
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const int32_t id = it.value().get<int32_t>();
    ANVIL_ENSURE(id >= 0, kInvalidInput, what, ": negative id for vocab entry '", it.key(), "'");
    std::string bytes = byte_level_to_bytes(it.key());
    t->vocab.emplace(bytes, id);
    t->id_bytes[static_cast<size_t>(id)] = std::move(bytes);
    t->id_used[static_cast<size_t>(id)] = true;
  }
  for (int b = 0; b < 256; ++b) {
    auto it = t->vocab.find(std::string(1, static_cast<char>(b)));
    t->byte_id[b] = it == t->vocab.end() ? -1 : it->second;
  }

  const Json& merges = model.at("merges");
  t->merges.reserve(merges.size());
  int32_t rank = 0;
  for (const Json& m : merges) {
    std::string a, b;
    if (m.is_string()) {
      const std::string s = m.get<std::string>();
      const size_t sp = s.find(' ', 1);
      ANVIL_ENSURE(sp != std::string::npos, kInvalidInput, what, ": merge ", rank, " '", s, "' is not 'a b'");
      a = s.substr(0, sp);
      b = s.substr(sp + 1);
    } else {
      ANVIL_ENSURE(m.is_array() && m.size() == 2, kInvalidInput, what, ": merge ", rank, " is not a pair");
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    }
    const std::string ba = byte_level_to_bytes(a), bb = byte_level_to_bytes(b);
    auto ia = t->vocab.find(ba), ib = t->vocab.find(bb), im = t->vocab.find(ba + bb);
    ANVIL_ENSURE(ia != t->vocab.end() && ib != t->vocab.end() && im != t->vocab.end(), kInvalidInput, what,
                 ": merge ", rank, " ('", a, "', '", b, "') names a token missing from the vocab");
    t->merges.insert(ia->second, ib->second, rank, im->second);
    ++rank;
  }

  for (const Json& a : j.value("added_tokens", Json::array())) {
    AddedToken tok;
    tok.id = a.at("id").get<int32_t>();
    tok.content = a.at("content").get<std::string>();
    tok.special = a.value("special", false);
    tok.single_word = a.value("single_word", false);
    tok.lstrip = a.value("lstrip", false);
    tok.rstrip = a.value("rstrip", false);
    tok.normalized = a.value("normalized", !tok.special);
    const auto index = static_cast<int32_t>(t->added.size());
    t->added_by_id[tok.id] = index;
    t->added_by_content[tok.content] = tok.id;
    t->added_decoded.push_back(byte_level_to_bytes(tok.content));
    if (tok.normalized) t->normalized_matcher.add(index, t->normalize(tok.content));
    else t->raw_matcher.add(index, tok.content);
    t->id_used[static_cast<size_t>(tok.id)] = true;
    t->added.push_back(std::move(tok));
  }
  t->raw_matcher.finish();
  t->normalized_matcher.finish();
  return Tokenizer(std::move(t));
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
  const Impl& t = *impl_;
  const size_t bad = utf8_invalid_at(text);
  ANVIL_ENSURE(bad == std::string_view::npos, kInvalidInput, "tokenizer input is not valid UTF-8 (byte ", bad, ")");
  t.split_added(text, t.raw_matcher, [&](std::string_view piece, int32_t index) {
    if (index >= 0) {
      out.push_back(t.added[static_cast<size_t>(index)].id);
      return;
    }
    const std::string normalized = t.normalize(piece);
    t.split_added(normalized, t.normalized_matcher, [&](std::string_view p, int32_t k) {
      if (k >= 0) out.push_back(t.added[static_cast<size_t>(k)].id);
      else t.pre_tokenize_and_bpe(p, out);
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
      bytes += t.id_bytes[static_cast<size_t>(id)];
    }
  }
  return utf8_lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto a = impl_->added_by_content.find(std::string(token));
  if (a != impl_->added_by_content.end()) return a->second;
  auto v = impl_->vocab.find(byte_level_to_bytes(token));
  if (v != impl_->vocab.end()) return v->second;
  return std::nullopt;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  const Impl& t = *impl_;
  ANVIL_ENSURE(id >= 0 && static_cast<size_t>(id) < t.id_used.size() && t.id_used[static_cast<size_t>(id)],
               kInvalidInput, "token id ", id, " is not in the vocabulary of ", t.what);
  auto it = t.added_by_id.find(id);
  if (it != t.added_by_id.end()) return t.added_decoded[static_cast<size_t>(it->second)];
  return t.id_bytes[static_cast<size_t>(id)];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_used.size()); }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }
const std::string& Tokenizer::hash() const { return impl_->hash; }

}  // namespace anvil
