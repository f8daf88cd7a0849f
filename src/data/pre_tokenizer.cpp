// PreTokenizer: the Oniguruma -> PCRE2 rewrite, the compiled regex, and the Split behaviors (see pre_tokenizer.h).
#include "data/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <deque>
#include <memory>
#include <utility>

#include "core/error.h"
#include "data/utf8.h"

namespace anvil {
namespace {

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

using Spans = std::vector<std::pair<std::pair<size_t, size_t>, bool>>;  // (begin, end), is a match

// Appends to next the pieces of p that `behavior` makes of spans (the matches and the text between them).
void merge_spans(SplitBehavior behavior, std::string_view p, const Spans& spans, std::vector<std::string_view>& next) {
  const size_t first = next.size();
  auto push = [&](size_t b, size_t e) { next.push_back(p.substr(b, e - b)); };
  auto extend_back = [&](size_t e) {  // the last piece, now ending at e
    const auto b = static_cast<size_t>(next.back().data() - p.data());
    next.back() = p.substr(b, e - b);
  };
  switch (behavior) {
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
        if (m && !prev_match && next.size() > first) extend_back(r.second);
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
        if (any && m == prev_match) extend_back(r.second);
        else push(r.first, r.second);
        any = true;
        prev_match = m;
      }
      break;
    }
  }
}

SplitBehavior split_behavior(const std::string& behavior, const std::string& what) {
  if (behavior == "Isolated") return SplitBehavior::kIsolated;
  if (behavior == "Removed") return SplitBehavior::kRemoved;
  if (behavior == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
  if (behavior == "MergedWithNext") return SplitBehavior::kMergedWithNext;
  if (behavior == "Contiguous") return SplitBehavior::kContiguous;
  raise(ErrorKind::kUnsupported, what, ": Split behavior '", behavior, "' is not supported");
}

}  // namespace

struct PreTokenizer::Step {
  std::unique_ptr<Regex> regex;  // Split, or ByteLevel with use_regex
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
};

PreTokenizer::PreTokenizer() = default;
PreTokenizer::~PreTokenizer() = default;

void PreTokenizer::add_step(const Json& j, const std::string& what) {
  const std::string type = j.value("type", "");
  Step step;
  if (type == "Split") {
    const Json& pat = j.at("pattern");
    std::string pattern;
    if (pat.contains("Regex")) pattern = onig_to_pcre2(pat.at("Regex").get<std::string>(), what);
    else if (pat.contains("String")) pattern = escape_literal(pat.at("String").get<std::string>());
    else raise(ErrorKind::kInvalidInput, what, ": Split pre-tokenizer has no Regex or String pattern");
    step.regex = std::make_unique<Regex>(pattern, what);
    step.behavior = split_behavior(j.value("behavior", "Isolated"), what);
    step.invert = j.value("invert", false);
  } else if (type == "ByteLevel") {
    step.add_prefix_space = j.value("add_prefix_space", false);
    if (j.value("use_regex", true)) step.regex = std::make_unique<Regex>(onig_to_pcre2(kGpt2Pattern, what), what);
  } else {
    raise(ErrorKind::kUnsupported, what, ": pre-tokenizer '", type,
          "' is not supported (anvil handles Split, ByteLevel and Sequence of them)");
  }
  steps_.push_back(std::move(step));
}

const std::vector<std::string_view>& PreTokenizer::split(std::string_view s) const {
  thread_local std::vector<std::string_view> cur, next;
  thread_local std::deque<std::string> arena;  // pieces that a prefix space made new
  thread_local Spans spans;
  cur.clear();
  arena.clear();
  if (!s.empty()) cur.push_back(s);
  for (const Step& step : steps_) {
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
      merge_spans(step.behavior, p, spans, next);
      // The reference drops empty pieces after every split.
      next.erase(std::remove_if(next.begin() + static_cast<std::ptrdiff_t>(first), next.end(),
                                [](std::string_view v) { return v.empty(); }),
                 next.end());
    }
    std::swap(cur, next);
  }
  return cur;
}

}  // namespace anvil
