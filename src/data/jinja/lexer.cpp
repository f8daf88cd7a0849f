// The Jinja lexer (see internal.h): text, tags and expression tokens, with jinja2's
// whitespace control (trim_blocks, lstrip_blocks, - and +).
#include <algorithm>
#include <charconv>
#include <cstdlib>

#include "core/error.h"
#include "data/jinja/internal.h"
#include "data/utf8.h"

namespace anvil::jinja::detail {

namespace {

class Lexer {
 public:
  Lexer(std::string source, std::string name) : src_(std::move(source)), name_(std::move(name)) {}

  std::vector<Token> run() {
    normalize_newlines();
    compute_lines();
    bool line_starting = true;
    size_t pos = 0;
    while (pos < src_.size()) {
      size_t tag = find_tag(pos);
      std::string text = src_.substr(pos, tag - pos);
      if (tag == src_.size()) {
        emit_text(text, pos);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        size_t keep = text.size();
        while (keep > 0 && is_space(text[keep - 1])) --keep;
        text.resize(keep);
      } else if (sign != '+' && kind != '{') {
        const size_t l_pos = text.rfind('\n') == std::string::npos ? 0 : text.rfind('\n') + 1;
        if (l_pos > 0 || line_starting) {
          bool blank = true;
          for (size_t k = l_pos; k < text.size(); ++k) blank = blank && is_space(text[k]);
          if (blank) text.resize(l_pos);
        }
      }
      emit_text(text, pos);
      size_t p = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      size_t end;
      if (kind == '#') {
        const size_t close = src_.find("#}", p);
        if (close == std::string::npos) fail(tag, "unterminated comment");
        const bool strip = close > p && src_[close - 1] == '-';
        end = close + 2;
        end = after_tag(end, strip, true);
      } else {
        const bool block = kind == '%';
        tokens_.push_back(make(block ? Tok::kBlockBegin : Tok::kVarBegin, "", tag));
        end = lex_inside(p, block);
      }
      line_starting = end > 0 && src_[end - 1] == '\n';
      pos = end;
    }
    tokens_.push_back(make(Tok::kEof, "", src_.size()));
    return std::move(tokens_);
  }

  Pos pos_of(size_t offset) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    return {static_cast<int>(line), static_cast<int>(offset - line_starts_[line - 1] + 1)};
  }

 private:
  static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

  // jinja2 turns \r\n and \r into \n and drops one trailing newline (keep_trailing_newline=False).
  void normalize_newlines() {
    std::string out;
    out.reserve(src_.size());
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\r') {
        out.push_back('\n');
        if (i + 1 < src_.size() && src_[i + 1] == '\n') ++i;
      } else {
        out.push_back(src_[i]);
      }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    src_ = std::move(out);
  }
  void compute_lines() {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  size_t find_tag(size_t pos) const {
    for (size_t i = pos; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  [[noreturn]] void fail(size_t offset, const std::string& what) const {
    const Pos p = pos_of(offset);
    raise(ErrorKind::kInvalidInput, name_, ":", p.line, ":", p.col, ": ", what);
  }

  Token make(Tok type, std::string text, size_t offset) const {
    const Pos p = pos_of(offset);
    return Token{type, std::move(text), p.line, p.col};
  }

  void emit_text(const std::string& text, size_t offset) {
    if (!text.empty()) tokens_.push_back(make(Tok::kText, text, offset));
  }

  // After a tag's closing marker: '-' strips all whitespace; trim_blocks drops one newline
  // after a block or comment tag.
  size_t after_tag(size_t end, bool strip, bool trim) const {
    if (strip) {
      while (end < src_.size() && is_space(src_[end])) ++end;
    } else if (trim && end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    return end;
  }

  size_t lex_inside(size_t p, bool block) {
    const char closer = block ? '%' : '}';
    for (;;) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) fail(p, block ? "unterminated {% tag" : "unterminated {{ tag");
      // Closing marker, with optional whitespace control.
      for (const char sign : {'-', '+', '\0'}) {
        const size_t q = p + (sign ? 1 : 0);
        if (sign && (p >= src_.size() || src_[p] != sign)) continue;
        if (q + 1 < src_.size() && src_[q] == closer && src_[q + 1] == '}') {
          if (sign == '+' && !block) continue;
          tokens_.push_back(make(block ? Tok::kBlockEnd : Tok::kVarEnd, "", p));
          return after_tag(q + 2, sign == '-', block && sign != '+');
        }
      }
      const char c = src_[p];
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t e = p;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        tokens_.push_back(make(Tok::kName, src_.substr(p, e - p), p));
        p = e;
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p);
      } else if (c == '\'' || c == '"') {
        p = lex_string(p);
      } else {
        static const char* ops2[] = {"**", "//", "==", "!=", "<=", ">="};
        std::string op;
        for (const char* o : ops2)
          if (src_.compare(p, 2, o) == 0) op = o;
        if (op.empty()) {
          if (std::string_view("+-*/%~<>()[]{},.:|=").find(c) == std::string_view::npos)
            fail(p, std::string("unexpected character '") + c + "'");
          op = std::string(1, c);
        }
        tokens_.push_back(make(Tok::kOp, op, p));
        p += op.size();
      }
    }
  }

  size_t lex_number(size_t p) {
    size_t e = p;
    while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t k = e + 1;
      if (k < src_.size() && (src_[k] == '+' || src_[k] == '-')) ++k;
      if (k < src_.size() && std::isdigit(static_cast<unsigned char>(src_[k]))) {
        is_float = true;
        e = k;
        while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
      }
    }
    std::string text;
    for (size_t k = p; k < e; ++k)
      if (src_[k] != '_') text.push_back(src_[k]);
    Token t = make(is_float ? Tok::kFloat : Tok::kInt, text, p);
    if (is_float) {
      t.f = std::strtod(text.c_str(), nullptr);  // as Python's: inf past the double range, 0 below it
    } else if (std::from_chars(text.data(), text.data() + text.size(), t.i).ec != std::errc()) {
      raise(ErrorKind::kUnsupported, name_, ":", t.line, ":", t.col, ": the integer ", text,
            " is past int64 (the chat-template renderer's integers are 64-bit, Python's unbounded)");
    }
    tokens_.push_back(t);
    return e;
  }

  // Python string-literal escapes (jinja2 decodes literals with unicode-escape).
  size_t lex_string(size_t p) {
    const char q = src_[p];
    std::string out;
    size_t i = p + 1;
    for (;;) {
      if (i >= src_.size()) fail(p, "unterminated string literal");
      const char c = src_[i];
      if (c == q) break;
      if (c != '\\' || i + 1 >= src_.size()) {
        out.push_back(c);
        ++i;
        continue;
      }
      const char e = src_[i + 1];
      i += 2;
      switch (e) {
        case 'n': out.push_back('\n'); break;
        case 't': out.push_back('\t'); break;
        case 'r': out.push_back('\r'); break;
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'v': out.push_back('\v'); break;
        case '0': out.push_back('\0'); break;
        case '\n': break;
        case 'x':
        case 'u':
        case 'U': {
          const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
          uint32_t cp = 0;
          const char* digits = src_.data() + i;
          if (i + n > src_.size() || std::from_chars(digits, digits + n, cp, 16).ptr != digits + n)
            fail(i, "truncated \\" + std::string(1, e) + " escape");
          if (cp > 0x10FFFF) fail(i, "illegal Unicode character in a \\U escape");
          utf8_append(out, cp);
          i += n;
          break;
        }
        default:
          out.push_back('\\');
          out.push_back(e);
      }
    }
    tokens_.push_back(make(Tok::kString, out, p));
    return i + 1;
  }

  std::string src_, name_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string source, const std::string& name) {
  Lexer lexer{std::move(source), name};
  return lexer.run();
}

}  // namespace anvil::jinja::detail
