// Byte-level BPE from tokenizer.json (see tokenizer.h for the pipeline and its reasons).
//
// Loading is on the path of every `anvil prepare`, and a tokenizer.json is large (Qwen3: 11 MB,
// 151k vocab entries, 151k merges), so it is parsed with simdjson, and the two big tables are
// built without nlohmann::json: the vocabulary's bytes go to one buffer indexed by an
// open-addressing table, and the merges resolve their ids in parallel before entering the
// merge table in rank order (the first of equal pairs wins, as before). Every other part of
// the file is small and goes through nlohmann::json as it always did. A file simdjson refuses
// is parsed again with nlohmann::json, whose error names the position. load() maps the file
// rather than reading it: on VMs where a page fault is slow, the memory a load touches for the
// first time is most of its cost, so the big tables are sized once and nothing is copied twice.
#include "data/tokenizer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <simdjson.h>
#include <utf8proc.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <climits>
#include <deque>
#include <future>
#include <unordered_map>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/threads.h"
#include "core/hash.h"
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

// The ByteLevel decoder's view of one token, appended to out: its characters mapped back to
// bytes, or the token's own UTF-8 when any character is outside the table (as the reference does).
// Every table character is below U+0200, so only one- and two-byte sequences are decoded
// (inline: this runs on every vocab and merge string at load).
void append_byte_level_bytes(std::string_view token, std::string& out) {
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
std::string byte_level_to_bytes(std::string_view token) {
  std::string out;
  append_byte_level_bytes(token, out);
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

// The model vocabulary: each entry's raw bytes in one buffer, an open-addressing index from
// bytes to id, and id -> bytes. Entries are added in file order; when two entries have the same
// bytes the first keeps them (lookups), and when two entries share an id the last names its
// bytes (id -> bytes). Built once at load, then read only.
class Vocab {
 public:
  void reserve(size_t entries, size_t bytes) {
    blob_.reserve(bytes);
    entries_.reserve(entries);
  }
  // Appends the bytes of token (byte-level characters) as the bytes of id.
  void add(std::string_view token, int32_t id) {
    const size_t start = blob_.size();
    append_byte_level_bytes(token, blob_);
    entries_.push_back({static_cast<uint32_t>(start), static_cast<uint32_t>(blob_.size() - start), id});
  }
  // After the last add: builds the index and id -> bytes for ids below id_count.
  void finish(size_t id_count) {
    size_t cap = 16;  // load at most 2/3: lookups are rare after load, and memory is load time
    while (cap * 2 < entries_.size() * 3) cap <<= 1;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    id_entry_.assign(id_count, -1);
    for (size_t e = 0; e < entries_.size(); ++e) {
      const std::string_view key = entry_bytes(e);
      const uint64_t h = hash(key);
      for (size_t i = h & mask_;; i = (i + 1) & mask_) {
        if (slots_[i].entry < 0) {
          slots_[i] = Slot{static_cast<uint32_t>(h >> 32), static_cast<int32_t>(e)};
          break;
        }
        if (slots_[i].tag == static_cast<uint32_t>(h >> 32) && entry_bytes(static_cast<size_t>(slots_[i].entry)) == key)
          break;  // the first entry with these bytes keeps them
      }
      id_entry_[static_cast<size_t>(entries_[e].id)] = static_cast<int32_t>(e);
    }
  }
  int32_t find(std::string_view bytes) const {
    const uint64_t h = hash(bytes);
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.entry < 0) return -1;
      if (s.tag == static_cast<uint32_t>(h >> 32) && entry_bytes(static_cast<size_t>(s.entry)) == bytes)
        return entries_[static_cast<size_t>(s.entry)].id;
    }
  }
  // The bytes of id ("" when no entry has it; id below finish's id_count).
  std::string_view bytes_of(int32_t id) const {
    const int32_t e = id_entry_[static_cast<size_t>(id)];
    return e < 0 ? std::string_view() : entry_bytes(static_cast<size_t>(e));
  }
  bool has_id(int32_t id) const { return id_entry_[static_cast<size_t>(id)] >= 0; }

 private:
  struct Entry {
    uint32_t start, length;
    int32_t id;
  };
  struct Slot {
    uint32_t tag = 0;  // the hash's high half
    int32_t entry = -1;
  };
  static uint64_t hash(std::string_view s) { return std::hash<std::string_view>{}(s) * 0x9E3779B97F4A7C15ull; }
  std::string_view entry_bytes(size_t e) const {
    return std::string_view(blob_).substr(entries_[e].start, entries_[e].length);
  }
  std::string blob_;
  std::vector<Entry> entries_;
  std::vector<int32_t> id_entry_;  // id -> entry, -1 when none
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
  Vocab vocab;
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
    const int32_t id = vocab.find(word);
    if (id >= 0) {
      out.push_back(id);
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

// A file mapped read-only and followed by at least SIMDJSON_PADDING readable bytes (anonymous
// zero pages), so simdjson parses it in place. Mapping the page cache costs a few ms where
// reading 11 MB into fresh memory costs ~90 ms on VMs with slow page faults. Not ok() when
// the file is empty or cannot be mapped (the caller reads it instead, for the error).
// As with any mapping, truncating the file while it is mapped would fault the reader.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      const auto size = static_cast<size_t>(st.st_size);
      const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
      const size_t total = (size + simdjson::SIMDJSON_PADDING + page - 1) / page * page;
      void* base = ::mmap(nullptr, total, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (base != MAP_FAILED) {
        if (::mmap(base, size, PROT_READ, MAP_PRIVATE | MAP_FIXED | MAP_POPULATE, fd, 0) == MAP_FAILED) {
          ::munmap(base, total);
        } else {
          base_ = base;
          size_ = size;
          total_ = total;
        }
      }
    }
    ::close(fd);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (base_ != nullptr) ::munmap(base_, total_);
  }
  bool ok() const { return base_ != nullptr; }
  std::string_view text() const { return std::string_view(static_cast<const char*>(base_), size_); }

 private:
  void* base_ = nullptr;
  size_t size_ = 0, total_ = 0;
};

// A small part of the file as nlohmann::json.
Json to_json(simdjson::dom::element e) { return Json::parse(simdjson::to_string(e)); }

// The whole file as nlohmann::json, less model.vocab and model.merges (read from simdjson).
Json small_parts(simdjson::dom::object root) {
  Json j = Json::object();
  for (const auto& field : root) {
    simdjson::dom::object model;
    if (field.key != "model" || field.value.get(model) != simdjson::SUCCESS) {
      j[std::string(field.key)] = to_json(field.value);
      continue;
    }
    Json m = Json::object();
    for (const auto& f : model)
      if (f.key != "vocab" && f.key != "merges") m[std::string(f.key)] = to_json(f.value);
    j["model"] = std::move(m);
  }
  return j;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& path) {
  const std::string file = is_directory(path) ? path_join(path, "tokenizer.json") : path;
  ANVIL_ENSURE(path_exists(file), kNotFound, file, ": no tokenizer.json (pass --tokenizer a model folder or the file)");
  const MappedFile mapped(file);
  if (!mapped.ok()) return from_json(read_file(file), file);  // read_file's error says why
  return parse(mapped.text(), true, file);
}

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& what) {
  return parse(json_text, false, what);
}

Tokenizer Tokenizer::parse(std::string_view json_text, bool padded, const std::string& what) {
  auto t = std::make_unique<Impl>();
  t->what = what;
  // Work that needs only the text or a count runs beside the rest; a future's destructor
  // waits for it, so no exit path leaves it running.
  auto hashed = std::async(std::launch::async, [json_text] { return hash_hex(json_text); });
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (const auto err = parser.parse(json_text.data(), json_text.size(), !padded).get(doc); err != simdjson::SUCCESS) {
    json_parse(std::string(json_text), what);  // nlohmann::json's error names the position
    raise(ErrorKind::kInvalidInput, what, ": not valid JSON (", simdjson::error_message(err), ")");
  }
  simdjson::dom::object root, model_doc;
  ANVIL_ENSURE(doc.get(root) == simdjson::SUCCESS, kInvalidInput, what, ": not a JSON object");
  const Json j = small_parts(root);
  ANVIL_ENSURE(j.contains("model") && j.at("model").is_object() && root["model"].get(model_doc) == simdjson::SUCCESS,
               kInvalidInput, what, ": no \"model\" object");
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

  simdjson::dom::object vocab;
  ANVIL_ENSURE(model_doc["vocab"].get(vocab) == simdjson::SUCCESS, kInvalidInput, what,
               ": model.vocab is missing or not an object");
  simdjson::dom::array merges;
  ANVIL_ENSURE(model_doc["merges"].get(merges) == simdjson::SUCCESS, kInvalidInput, what,
               ": model.merges is missing or not an array");
  // The merge table's memory is touched for the first time while the vocabulary is built.
  auto merge_table = std::async(std::launch::async, [impl = t.get(), n = merges.size()] { impl->merges.reserve(n); });
  int32_t max_id = -1;
  size_t key_bytes = 0;
  for (const auto& entry : vocab) {
    int64_t id = 0;
    ANVIL_ENSURE(entry.value.get(id) == simdjson::SUCCESS, kInvalidInput, what, ": vocab entry '", entry.key,
                 "' has id ", simdjson::to_string(entry.value), ", not an integer");
    ANVIL_ENSURE(id >= 0, kInvalidInput, what, ": negative id for vocab entry '", entry.key, "'");
    ANVIL_ENSURE(id <= INT32_MAX, kInvalidInput, what, ": id ", id, " of vocab entry '", entry.key,
                 "' does not fit 32 bits");
    max_id = std::max(max_id, static_cast<int32_t>(id));
    key_bytes += entry.key.size();
  }
  for (const Json& a : j.value("added_tokens", Json::array())) max_id = std::max(max_id, a.at("id").get<int32_t>());
  t->id_used.assign(static_cast<size_t>(max_id + 1), false);
  t->vocab.reserve(vocab.size(), key_bytes);
  for (const auto& entry : vocab) {
    const auto id = static_cast<int32_t>(entry.value.get_int64().value_unsafe());
    t->vocab.add(entry.key, id);
    t->id_used[static_cast<size_t>(id)] = true;
  }
  t->vocab.finish(static_cast<size_t>(max_id + 1));
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    t->byte_id[b] = t->vocab.find(std::string_view(&c, 1));
  }

  // Each merge's ids resolve on its own (in parallel); the table takes them in rank order.
  std::vector<simdjson::dom::element> merge_items;
  merge_items.reserve(merges.size());
  for (simdjson::dom::element m : merges) merge_items.push_back(m);
  struct MergeIds {
    int32_t a, b, merged;
  };
  std::vector<MergeIds> merge_ids(merge_items.size());
  parallel_for(static_cast<int64_t>(merge_items.size()), 16384, [&](int64_t begin, int64_t end) {
    std::string bytes;
    for (int64_t rank = begin; rank < end; ++rank) {
      const simdjson::dom::element m = merge_items[static_cast<size_t>(rank)];
      std::string_view a, b;
      if (m.is_string()) {
        const std::string_view s = m.get_string().value_unsafe();
        const size_t sp = s.find(' ', 1);
        ANVIL_ENSURE(sp != std::string_view::npos, kInvalidInput, what, ": merge ", rank, " '", s, "' is not 'a b'");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        simdjson::dom::array pair;
        ANVIL_ENSURE(m.get(pair) == simdjson::SUCCESS && pair.size() == 2 && pair.at(0).get(a) == simdjson::SUCCESS &&
                         pair.at(1).get(b) == simdjson::SUCCESS,
                     kInvalidInput, what, ": merge ", rank, " is not a pair of strings");
      }
      bytes.clear();
      append_byte_level_bytes(a, bytes);
      const size_t split = bytes.size();
      append_byte_level_bytes(b, bytes);
      const std::string_view both = bytes;
      const MergeIds ids{t->vocab.find(both.substr(0, split)), t->vocab.find(both.substr(split)), t->vocab.find(both)};
      ANVIL_ENSURE(ids.a >= 0 && ids.b >= 0 && ids.merged >= 0, kInvalidInput, what, ": merge ", rank, " ('", a,
                   "', '", b, "') names a token missing from the vocab");
      merge_ids[static_cast<size_t>(rank)] = ids;
    }
  });
  merge_table.get();
  if (merge_items.size() > merges.size()) t->merges.reserve(merge_items.size());  // size() saturates at 2^24 - 1
  for (size_t rank = 0; rank < merge_ids.size(); ++rank)
    t->merges.insert(merge_ids[rank].a, merge_ids[rank].b, static_cast<int32_t>(rank), merge_ids[rank].merged);

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
  t->hash = hashed.get();
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
      bytes += t.vocab.bytes_of(id);
    }
  }
  return utf8_lossy(bytes);
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto a = impl_->added_by_content.find(std::string(token));
  if (a != impl_->added_by_content.end()) return a->second;
  const int32_t v = impl_->vocab.find(byte_level_to_bytes(token));
  if (v >= 0) return v;
  return std::nullopt;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  const Impl& t = *impl_;
  ANVIL_ENSURE(id >= 0 && static_cast<size_t>(id) < t.id_used.size() && t.id_used[static_cast<size_t>(id)],
               kInvalidInput, "token id ", id, " is not in the vocabulary of ", t.what);
  auto it = t.added_by_id.find(id);
  if (it != t.added_by_id.end()) return t.added_decoded[static_cast<size_t>(it->second)];
  return t.vocab.bytes_of(id);
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_used.size()); }
const std::vector<AddedToken>& Tokenizer::added_tokens() const { return impl_->added; }
const std::string& Tokenizer::hash() const { return impl_->hash; }

}  // namespace anvil
