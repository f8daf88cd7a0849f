// The Jinja subset (see jinja.h): lexer with jinja2's whitespace rules, recursive-descent
// parser with jinja2's precedence, tree-walking renderer with Python value semantics.
#include "data/jinja.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <unordered_map>

#include "core/error.h"
#include "data/case_map.h"
#include "data/utf8.h"

namespace anvil::jinja {

// ---------------------------------------------------------------------------------------
// Values

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}
Value::Value(bool b) : kind_(Kind::kBool), b_(b) {}
Value::Value(int64_t i) : kind_(Kind::kInt), i_(i) {}
Value::Value(double f) : kind_(Kind::kFloat), f_(f) {}
Value::Value(std::string s) : kind_(Kind::kString), s_(std::make_shared<std::string>(std::move(s))) {}
Value::Value(List l) : kind_(Kind::kList), l_(std::make_shared<List>(std::move(l))) {}
Value::Value(Dict d) : kind_(Kind::kDict), d_(std::make_shared<Dict>(std::move(d))) {}
Value Value::make_namespace(Dict d) {
  Value v(std::move(d));
  v.kind_ = Kind::kNamespace;
  return v;
}
Value Value::function(Function f) {
  Value v;
  v.kind_ = Kind::kFunction;
  v.fn_ = std::make_shared<Function>(std::move(f));
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return none();
    case nlohmann::ordered_json::value_t::boolean: return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: return Value(static_cast<int64_t>(j.get<uint64_t>()));
    case nlohmann::ordered_json::value_t::number_float: return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List l;
      l.reserve(j.size());
      for (const auto& e : j) l.push_back(from_json(e));
      return Value(std::move(l));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      d.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) d.emplace_back(it.key(), from_json(it.value()));
      return Value(std::move(d));
    }
    default: return Value();
  }
}

const Value* Value::find(std::string_view key) const {
  if (!is_dict()) return nullptr;
  for (const auto& [k, v] : *d_)
    if (k == key) return &v;
  return nullptr;
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return f_ != 0;
    case Kind::kString: return !s_->empty();
    case Kind::kList: return !l_->empty();
    case Kind::kDict: return !d_->empty();
    case Kind::kNamespace:
    case Kind::kFunction: return true;
  }
  return false;
}

namespace {

using Kind = Value::Kind;

// Python's repr(float): shortest round-trip digits; scientific when exp < -4 or >= 16.
std::string python_float(double f) {
  if (std::isnan(f)) return "nan";
  if (std::isinf(f)) return f < 0 ? "-inf" : "inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits.push_back(c);
  std::string out;
  if (exp < -4 || exp >= 16) {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', std::abs(exp));
    out += eb;
  } else if (exp < 0) {
    out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
  } else {
    const auto point = static_cast<size_t>(exp + 1);
    if (digits.size() <= point) out = digits + std::string(point - digits.size(), '0') + ".0";
    else out = digits.substr(0, point) + "." + digits.substr(point);
  }
  return neg ? "-" + out : out;
}

std::string python_repr_string(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char q = has_single && !has_double ? '"' : '\'';
  std::string out(1, q);
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const char32_t c = utf8_next(s, i);
    if (c == static_cast<char32_t>(q) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7F) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", static_cast<unsigned>(c));
      out += b;
    } else {
      out.append(s, start, i - start);
    }
  }
  out.push_back(q);
  return out;
}

std::string repr(const Value& v);

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Kind::kString: return python_repr_string(v.str());
    case Kind::kList: {
      std::string out = "[";
      for (size_t k = 0; k < v.list().size(); ++k) out += (k ? ", " : "") + repr(v.list()[k]);
      return out + "]";
    }
    case Kind::kDict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [key, val] : v.dict()) {
        out += (first ? "" : ", ") + python_repr_string(key) + ": " + repr(val);
        first = false;
      }
      return out + "}";
    }
    default: return to_output(v);
  }
}

void json_string(std::string& out, const std::string& s) {
  out.push_back('"');
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

void json_dump(std::string& out, const Value& v, int indent, int depth) {
  const auto newline = [&](int d) {
    out.push_back('\n');
    out.append(static_cast<size_t>(indent * d), ' ');
  };
  switch (v.kind()) {
    case Kind::kNone: out += "null"; return;
    case Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::kInt: out += std::to_string(v.as_int()); return;
    case Kind::kFloat: {
      const double f = v.as_float();
      out += std::isnan(f) ? "NaN" : std::isinf(f) ? (f < 0 ? "-Infinity" : "Infinity") : python_float(f);
      return;
    }
    case Kind::kString: json_string(out, v.str()); return;
    case Kind::kList: {
      if (v.list().empty()) {
        out += "[]";
        return;
      }
      out.push_back('[');
      for (size_t k = 0; k < v.list().size(); ++k) {
        if (k) out += indent >= 0 ? "," : ", ";
        if (indent >= 0) newline(depth + 1);
        json_dump(out, v.list()[k], indent, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out.push_back(']');
      return;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      if (v.dict().empty()) {
        out += "{}";
        return;
      }
      out.push_back('{');
      bool first = true;
      for (const auto& [key, val] : v.dict()) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(depth + 1);
        json_string(out, key);
        out += ": ";
        json_dump(out, val, indent, depth + 1);
      }
      if (indent >= 0) newline(depth);
      out.push_back('}');
      return;
    }
    case Kind::kUndefined: raise(ErrorKind::kInvalidInput, "tojson: an undefined value is not JSON serializable");
    case Kind::kFunction: raise(ErrorKind::kInvalidInput, "tojson: a function is not JSON serializable");
  }
}

}  // namespace

std::string to_output(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "";
    case Kind::kNone: return "None";
    case Kind::kBool: return v.as_bool() ? "True" : "False";
    case Kind::kInt: return std::to_string(v.as_int());
    case Kind::kFloat: return python_float(v.as_float());
    case Kind::kString: return v.str();
    case Kind::kList:
    case Kind::kDict: return repr(v);
    case Kind::kNamespace: return "<Namespace>";
    case Kind::kFunction: return "<function>";
  }
  return "";
}

std::string to_json_text(const Value& v, int indent) {
  std::string out;
  json_dump(out, v, indent, 0);
  return out;
}

// ---------------------------------------------------------------------------------------
// Lexer

namespace {

enum class Tok { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };

struct Token {
  Tok type;
  std::string text;  // text, name, operator, or the unescaped string literal
  int line, col;
  int64_t i = 0;
  double f = 0;
};

struct Pos {
  int line, col;
};

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
    if (is_float) t.f = std::stod(text);
    else t.i = std::stoll(text);
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
          if (i + n > src_.size()) fail(i, "truncated \\" + std::string(1, e) + " escape");
          const auto cp = static_cast<char32_t>(std::stoul(src_.substr(i, n), nullptr, 16));
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

// ---------------------------------------------------------------------------------------
// AST

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

enum class ExprType {
  kLiteral, kName, kAttr, kItem, kSlice, kCall, kFilter, kTest, kNeg, kPos, kNot,
  kBinary, kAnd, kOr, kCompare, kCond, kList, kDict
};

struct Expr {
  ExprType type;
  int line = 0, col = 0;
  Value literal;
  std::string name;  // name, attribute, filter/test name, binary operator
  std::vector<ExprPtr> kids;  // operands / positional args / list items / dict keys+values
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;  // comparison chain operators
  bool negated = false;          // "is not"
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

enum class NodeType { kText, kPrint, kIf, kFor, kSet, kSetBlock, kMacro, kBreak, kContinue, kBlockBody };

struct Node {
  NodeType type;
  int line = 0, col = 0;
  std::string text;                  // kText; kSet/kSetBlock/kMacro: the name
  std::string attr;                  // kSet on a namespace attribute
  ExprPtr expr;                      // kPrint, kSet value, kFor iterable
  std::vector<std::pair<ExprPtr, Body>> branches;  // kIf: (condition, body)...
  Body body, else_body;
  std::vector<std::string> targets;  // kFor loop variables
  ExprPtr filter;                    // kFor inline "if"
  std::vector<std::string> params;   // kMacro
  std::vector<ExprPtr> defaults;     // kMacro, aligned with params (null: none)
};

// ---------------------------------------------------------------------------------------
// Parser

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string name) : t_(std::move(tokens)), name_(std::move(name)) {}

  Body parse_template() {
    Body body = parse_body({});
    if (cur().type != Tok::kEof) fail(cur(), "unexpected '{% " + peek_name() + " %}'");
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& next_tok() { return t_[i_++]; }
  [[noreturn]] void fail(const Token& t, const std::string& what) const {
    raise(ErrorKind::kInvalidInput, name_, ":", t.line, ":", t.col, ": ", what);
  }
  [[noreturn]] void unsupported(const Token& t, const std::string& what) const {
    raise(ErrorKind::kUnsupported, name_, ":", t.line, ":", t.col, ": ", what,
          " is not supported by anvil's chat-template renderer");
  }
  bool is_op(const char* op) const { return cur().type == Tok::kOp && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::kName && cur().text == n; }
  void expect_op(const char* op) {
    if (!is_op(op)) fail(cur(), std::string("expected '") + op + "'" + found());
    ++i_;
  }
  void expect_name(const char* n) {
    if (!is_name(n)) fail(cur(), std::string("expected '") + n + "'" + found());
    ++i_;
  }
  std::string found() const {
    switch (cur().type) {
      case Tok::kEof: return ", found the end of the template";
      case Tok::kBlockEnd: return ", found '%}'";
      case Tok::kVarEnd: return ", found '}}'";
      default: return ", found '" + cur().text + "'";
    }
  }
  std::string take_name() {
    if (cur().type != Tok::kName) fail(cur(), "expected a name" + found());
    return next_tok().text;
  }
  void expect_block_end() {
    if (cur().type != Tok::kBlockEnd) fail(cur(), "expected '%}'" + found());
    ++i_;
  }
  std::string peek_name() const {
    return i_ + 1 < t_.size() && t_[i_ + 1].type == Tok::kName ? t_[i_ + 1].text : std::string();
  }

  template <class T>
  std::unique_ptr<T> at(const Token& t) {
    auto p = std::make_unique<T>();
    p->line = t.line;
    p->col = t.col;
    return p;
  }

  // Parses nodes until a block tag whose name is in `stops` (left unconsumed) or the end.
  Body parse_body(const std::vector<std::string>& stops) {
    Body body;
    for (;;) {
      const Token& t = cur();
      if (t.type == Tok::kEof) {
        if (!stops.empty()) fail(t, "missing '{% " + stops.back() + " %}'");
        return body;
      }
      if (t.type == Tok::kText) {
        auto n = at<Node>(t);
        n->type = NodeType::kText;
        n->text = t.text;
        body.push_back(std::move(n));
        ++i_;
      } else if (t.type == Tok::kVarBegin) {
        ++i_;
        auto n = at<Node>(t);
        n->type = NodeType::kPrint;
        n->expr = parse_expr();
        if (cur().type != Tok::kVarEnd) fail(cur(), "expected '}}'" + found());
        ++i_;
        body.push_back(std::move(n));
      } else if (t.type == Tok::kBlockBegin) {
        const std::string kw = peek_name();
        if (std::find(stops.begin(), stops.end(), kw) != stops.end()) return body;
        ++i_;
        body.push_back(parse_statement(t));
      } else {
        fail(t, "unexpected token");
      }
    }
  }

  void end_tag(const char* name) {
    if (cur().type != Tok::kBlockBegin) fail(cur(), std::string("expected '{% ") + name + " %}'");
    ++i_;
    expect_name(name);
    expect_block_end();
  }

  NodePtr parse_statement(const Token& begin) {
    const Token& kw = cur();
    if (kw.type != Tok::kName) fail(kw, "expected a statement name" + found());
    const std::string k = kw.text;
    ++i_;
    auto n = at<Node>(begin);
    if (k == "if") {
      n->type = NodeType::kIf;
      ExprPtr cond = parse_expr();
      expect_block_end();
      for (;;) {
        Body b = parse_body({"elif", "else", "endif"});
        n->branches.emplace_back(std::move(cond), std::move(b));
        ++i_;  // {%
        const std::string which = take_name();
        if (which == "elif") {
          cond = parse_expr();
          expect_block_end();
          continue;
        }
        expect_block_end();
        if (which == "else") {
          n->else_body = parse_body({"endif"});
          end_tag("endif");
        }
        break;
      }
    } else if (k == "for") {
      n->type = NodeType::kFor;
      n->targets.push_back(take_name());
      while (is_op(",")) {
        ++i_;
        n->targets.push_back(take_name());
      }
      expect_name("in");
      n->expr = parse_or_expr(/*no_cond=*/true);
      if (is_name("if")) {
        ++i_;
        n->filter = parse_expr();
      }
      if (is_name("recursive")) unsupported(cur(), "'recursive' for loops");
      expect_block_end();
      n->body = parse_body({"else", "endfor"});
      ++i_;
      const std::string which = take_name();
      expect_block_end();
      if (which == "else") {
        n->else_body = parse_body({"endfor"});
        end_tag("endfor");
      }
    } else if (k == "set") {
      n->text = take_name();
      if (is_op(".")) {
        ++i_;
        n->attr = take_name();
      }
      if (is_op(",")) unsupported(cur(), "'set' with several targets");
      if (cur().type == Tok::kBlockEnd) {
        if (!n->attr.empty()) fail(cur(), "a block 'set' takes a plain name");
        ++i_;
        n->type = NodeType::kSetBlock;
        n->body = parse_body({"endset"});
        end_tag("endset");
      } else {
        n->type = NodeType::kSet;
        expect_op("=");
        n->expr = parse_expr();
        expect_block_end();
      }
    } else if (k == "macro") {
      n->type = NodeType::kMacro;
      n->text = take_name();
      expect_op("(");
      while (!is_op(")")) {
        n->params.push_back(take_name());
        if (is_op("=")) {
          ++i_;
          n->defaults.push_back(parse_expr());
        } else {
          n->defaults.push_back(nullptr);
        }
        if (!is_op(")")) expect_op(",");
      }
      ++i_;
      expect_block_end();
      n->body = parse_body({"endmacro"});
      end_tag("endmacro");
    } else if (k == "break" || k == "continue") {
      n->type = k == "break" ? NodeType::kBreak : NodeType::kContinue;
      expect_block_end();
    } else if (k == "generation") {
      // transformers' AssistantTracker: marks assistant text for return_assistant_tokens_mask;
      // the rendered string is the body itself.
      n->type = NodeType::kBlockBody;
      expect_block_end();
      n->body = parse_body({"endgeneration"});
      end_tag("endgeneration");
    } else {
      unsupported(begin, "the statement '{% " + k + " %}'");
    }
    return n;
  }

  // Expressions, in jinja2's precedence order.
  ExprPtr parse_expr() { return parse_or_expr(false); }

  ExprPtr parse_or_expr(bool no_cond) {
    ExprPtr e = parse_or();
    if (!no_cond && is_name("if")) {
      const Token& t = next_tok();
      auto c = at<Expr>(t);
      c->type = ExprType::kCond;
      ExprPtr cond = parse_or();
      ExprPtr other;
      if (is_name("else")) {
        ++i_;
        other = parse_or_expr(false);
      }
      c->kids.push_back(std::move(cond));
      c->kids.push_back(std::move(e));
      c->kids.push_back(std::move(other));
      return c;
    }
    return e;
  }
  ExprPtr binary(ExprType type, const Token& t, ExprPtr l, ExprPtr r, std::string op = "") {
    auto e = at<Expr>(t);
    e->type = type;
    e->name = std::move(op);
    e->kids.push_back(std::move(l));
    e->kids.push_back(std::move(r));
    return e;
  }
  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const Token& t = next_tok();
      l = binary(ExprType::kOr, t, std::move(l), parse_and());
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const Token& t = next_tok();
      l = binary(ExprType::kAnd, t, std::move(l), parse_not());
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token& t = next_tok();
      auto e = at<Expr>(t);
      e->type = ExprType::kNot;
      e->kids.push_back(parse_not());
      return e;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const Token& start = cur();
    ExprPtr first = parse_math1();
    std::unique_ptr<Expr> chain;
    for (;;) {
      std::string op;
      if (cur().type == Tok::kOp &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == ">" ||
           cur().text == "<=" || cur().text == ">=")) {
        op = next_tok().text;
      } else if (is_name("in")) {
        ++i_;
        op = "in";
      } else if (is_name("not") && i_ + 1 < t_.size() && t_[i_ + 1].type == Tok::kName && t_[i_ + 1].text == "in") {
        i_ += 2;
        op = "not in";
      } else {
        break;
      }
      if (!chain) {
        chain = at<Expr>(start);
        chain->type = ExprType::kCompare;
        chain->kids.push_back(std::move(first));
      }
      chain->ops.push_back(op);
      chain->kids.push_back(parse_math1());
    }
    return chain ? std::move(chain) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next_tok();
      l = binary(ExprType::kBinary, t, std::move(l), parse_concat(), t.text);
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      const Token& t = next_tok();
      l = binary(ExprType::kBinary, t, std::move(l), parse_math2(), "~");
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next_tok();
      l = binary(ExprType::kBinary, t, std::move(l), parse_pow(), t.text);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      const Token& t = next_tok();
      l = binary(ExprType::kBinary, t, std::move(l), parse_unary(true), "**");
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      const Token& t = next_tok();
      node = at<Expr>(t);
      node->type = t.text == "-" ? ExprType::kNeg : ExprType::kPos;
      node->kids.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }
  ExprPtr parse_primary() {
    const Token& t = cur();
    auto e = at<Expr>(t);
    e->type = ExprType::kLiteral;
    switch (t.type) {
      case Tok::kName:
        ++i_;
        if (t.text == "true" || t.text == "True") e->literal = Value(true);
        else if (t.text == "false" || t.text == "False") e->literal = Value(false);
        else if (t.text == "none" || t.text == "None") e->literal = Value::none();
        else {
          e->type = ExprType::kName;
          e->name = t.text;
        }
        return e;
      case Tok::kString: {
        ++i_;
        std::string s = t.text;
        while (cur().type == Tok::kString) s += next_tok().text;  // adjacent literals concatenate
        e->literal = Value(std::move(s));
        return e;
      }
      case Tok::kInt: ++i_; e->literal = Value(t.i); return e;
      case Tok::kFloat: ++i_; e->literal = Value(t.f); return e;
      case Tok::kOp:
        if (t.text == "(") {
          ++i_;
          if (is_op(")")) {
            ++i_;
            e->type = ExprType::kList;
            return e;
          }
          ExprPtr inner = parse_expr();
          if (is_op(",")) {  // a tuple: a list for our purposes
            e->type = ExprType::kList;
            e->kids.push_back(std::move(inner));
            while (is_op(",")) {
              ++i_;
              if (is_op(")")) break;
              e->kids.push_back(parse_expr());
            }
            expect_op(")");
            return e;
          }
          expect_op(")");
          return inner;
        }
        if (t.text == "[") {
          ++i_;
          e->type = ExprType::kList;
          while (!is_op("]")) {
            e->kids.push_back(parse_expr());
            if (!is_op("]")) expect_op(",");
          }
          ++i_;
          return e;
        }
        if (t.text == "{") {
          ++i_;
          e->type = ExprType::kDict;
          while (!is_op("}")) {
            e->kids.push_back(parse_expr());
            expect_op(":");
            e->kids.push_back(parse_expr());
            if (!is_op("}")) expect_op(",");
          }
          ++i_;
          return e;
        }
        break;
      default: break;
    }
    fail(t, "expected an expression" + found());
  }
  void parse_call_args(Expr& call) {
    expect_op("(");
    while (!is_op(")")) {
      if (cur().type == Tok::kName && i_ + 1 < t_.size() && t_[i_ + 1].type == Tok::kOp && t_[i_ + 1].text == "=") {
        std::string key = next_tok().text;
        ++i_;
        call.kwargs.emplace_back(std::move(key), parse_expr());
      } else {
        if (is_op("*") || is_op("**")) unsupported(cur(), "argument unpacking (*args, **kwargs)");
        call.kids.push_back(parse_expr());
      }
      if (!is_op(")")) expect_op(",");
    }
    ++i_;
  }
  ExprPtr parse_postfix(ExprPtr node) {
    for (;;) {
      const Token& t = cur();
      if (is_op(".")) {
        ++i_;
        auto e = at<Expr>(t);
        e->type = ExprType::kAttr;
        if (cur().type == Tok::kInt) {  // foo.0
          e->type = ExprType::kItem;
          auto idx = at<Expr>(cur());
          idx->type = ExprType::kLiteral;
          idx->literal = Value(next_tok().i);
          e->kids.push_back(std::move(node));
          e->kids.push_back(std::move(idx));
        } else {
          e->name = take_name();
          e->kids.push_back(std::move(node));
        }
        node = std::move(e);
      } else if (is_op("[")) {
        ++i_;
        auto e = at<Expr>(t);
        ExprPtr parts[3];
        bool slice = false;
        int k = 0;
        for (;;) {
          if (is_op(":")) {
            slice = true;
            ++i_;
            if (++k > 2) fail(cur(), "too many ':' in a slice");
            continue;
          }
          if (is_op("]")) break;
          if (parts[k]) fail(cur(), "expected ']' or ':'" + found());
          parts[k] = parse_expr();
        }
        ++i_;
        e->kids.push_back(std::move(node));
        if (slice) {
          e->type = ExprType::kSlice;
          for (auto& p : parts) e->kids.push_back(std::move(p));
        } else {
          if (!parts[0]) fail(t, "empty subscript");
          e->type = ExprType::kItem;
          e->kids.push_back(std::move(parts[0]));
        }
        node = std::move(e);
      } else if (is_op("(")) {
        auto e = at<Expr>(t);
        e->type = ExprType::kCall;
        e->kids.push_back(std::move(node));
        parse_call_args(*e);
        node = std::move(e);
      } else {
        return node;
      }
    }
  }
  ExprPtr parse_filter_expr(ExprPtr node) {
    for (;;) {
      if (is_op("|")) {
        const Token& t = next_tok();
        auto e = at<Expr>(t);
        e->type = ExprType::kFilter;
        e->name = take_name();
        while (is_op(".")) {
          ++i_;
          e->name += "." + take_name();
        }
        e->kids.push_back(std::move(node));
        if (is_op("(")) parse_call_args(*e);
        node = std::move(e);
      } else if (is_name("is")) {
        const Token& t = next_tok();
        auto e = at<Expr>(t);
        e->type = ExprType::kTest;
        if (is_name("not")) {
          ++i_;
          e->negated = true;
        }
        e->name = take_name();
        e->kids.push_back(std::move(node));
        if (is_op("(")) {
          parse_call_args(*e);
        } else if (cur().type == Tok::kString || cur().type == Tok::kInt || cur().type == Tok::kFloat ||
                   (cur().type == Tok::kName && !is_name("and") && !is_name("or") && !is_name("else") &&
                    !is_name("if") && !is_name("is") && !is_name("in") && !is_name("not"))) {
          e->kids.push_back(parse_primary());  // "is divisibleby 3", "is sameas false"
        }
        node = std::move(e);
      } else if (is_op("(")) {
        const Token& t = cur();
        auto e = at<Expr>(t);
        e->type = ExprType::kCall;
        e->kids.push_back(std::move(node));
        parse_call_args(*e);
        node = std::move(e);
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  std::string name_;
  size_t i_ = 0;
};

// ---------------------------------------------------------------------------------------
// Renderer

enum class Flow { kNormal, kBreak, kContinue };

struct Frame {
  std::unordered_map<std::string, Value> vars;
  bool barrier = false;  // a macro call: names resolve in it, then in the globals
};

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "bool";
    case Kind::kInt: return "int";
    case Kind::kFloat: return "float";
    case Kind::kString: return "str";
    case Kind::kList: return "list";
    case Kind::kDict: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kFunction: return "function";
  }
  return "?";
}

bool is_number(const Value& v) { return v.kind() == Kind::kInt || v.kind() == Kind::kFloat || v.kind() == Kind::kBool; }
double num(const Value& v) {
  return v.kind() == Kind::kFloat ? v.as_float() : v.kind() == Kind::kBool ? (v.as_bool() ? 1.0 : 0.0) : static_cast<double>(v.as_int());
}
int64_t inum(const Value& v) { return v.kind() == Kind::kBool ? (v.as_bool() ? 1 : 0) : v.as_int(); }
bool is_intlike(const Value& v) { return v.kind() == Kind::kInt || v.kind() == Kind::kBool; }

bool equal(const Value& a, const Value& b) {
  if (is_number(a) && is_number(b)) return num(a) == num(b);
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::kUndefined:
    case Kind::kNone: return true;
    case Kind::kString: return a.str() == b.str();
    case Kind::kList:
      if (a.list().size() != b.list().size()) return false;
      for (size_t k = 0; k < a.list().size(); ++k)
        if (!equal(a.list()[k], b.list()[k])) return false;
      return true;
    case Kind::kDict:
      if (a.dict().size() != b.dict().size()) return false;
      for (const auto& [k, v] : a.dict()) {
        const Value* o = b.find(k);
        if (!o || !equal(v, *o)) return false;
      }
      return true;
    default: return &a == &b;
  }
}

std::vector<char32_t> code_points(const std::string& s) {
  std::vector<char32_t> out;
  size_t i = 0;
  while (i < s.size()) out.push_back(utf8_next(s, i));
  return out;
}
std::string from_code_points(const std::vector<char32_t>& cps) {
  std::string out;
  for (char32_t c : cps) utf8_append(out, c);
  return out;
}

// Python slice indices for a sequence of length n.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step) {
  const int64_t st = step.is_none() || step.is_undefined() ? 1 : inum(step);
  ANVIL_ENSURE(st != 0, kInvalidInput, "slice step cannot be zero");
  auto norm = [&](const Value& v, int64_t dflt, int64_t lo, int64_t hi) {
    if (v.is_none() || v.is_undefined()) return dflt;
    int64_t x = inum(v);
    if (x < 0) x += n;
    return std::clamp(x, lo, hi);
  };
  std::vector<int64_t> out;
  if (st > 0) {
    const int64_t b = norm(start, 0, 0, n), e = norm(stop, n, 0, n);
    for (int64_t k = b; k < e; k += st) out.push_back(k);
  } else {
    const int64_t b = norm(start, n - 1, -1, n - 1), e = norm(stop, -1, -1, n - 1);
    for (int64_t k = b; k > e; k += st) out.push_back(k);
  }
  return out;
}

std::string py_strip(const std::string& s, const Value& chars, bool left, bool right) {
  const std::vector<char32_t> cps = code_points(s);
  std::vector<char32_t> set;
  const bool ws = chars.is_none() || chars.is_undefined();
  if (!ws) set = code_points(chars.str());
  auto strip_it = [&](char32_t c) {
    return ws ? python_isspace(c) : std::find(set.begin(), set.end(), c) != set.end();
  };
  size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return from_code_points(std::vector<char32_t>(cps.begin() + static_cast<std::ptrdiff_t>(b),
                                                cps.begin() + static_cast<std::ptrdiff_t>(e)));
}

List py_split(const std::string& s, const Value& sep, int64_t maxsplit) {
  List out;
  if (sep.is_none() || sep.is_undefined()) {
    const std::vector<char32_t> cps = code_points(s);
    size_t i = 0;
    while (i < cps.size()) {
      while (i < cps.size() && python_isspace(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
        size_t e = cps.size();
        while (e > i && python_isspace(cps[e - 1])) --e;
        out.emplace_back(from_code_points({cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(e)}));
        break;
      }
      size_t j = i;
      while (j < cps.size() && !python_isspace(cps[j])) ++j;
      out.emplace_back(from_code_points({cps.begin() + static_cast<std::ptrdiff_t>(i), cps.begin() + static_cast<std::ptrdiff_t>(j)}));
      i = j;
    }
    return out;
  }
  const std::string& d = sep.str();
  ANVIL_ENSURE(!d.empty(), kInvalidInput, "str.split: empty separator");
  size_t pos = 0;
  for (;;) {
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) break;
    const size_t f = s.find(d, pos);
    if (f == std::string::npos) break;
    out.emplace_back(s.substr(pos, f - pos));
    pos = f + d.size();
  }
  out.emplace_back(s.substr(pos));
  return out;
}

std::string map_case(const std::string& s, int mode) {  // 0 lower, 1 upper, 2 title, 3 capitalize
  static constexpr CaseMode kModes[] = {CaseMode::kLower, CaseMode::kUpper, CaseMode::kTitle, CaseMode::kCapitalize};
  return python_case(s, kModes[mode]);
}

std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count) {
  std::string out;
  if (from.empty()) {  // Python inserts `to` between every character
    const auto cps = code_points(s);
    int64_t n = 0;
    for (size_t k = 0; k <= cps.size(); ++k) {
      if (count < 0 || n < count) {
        out += to;
        ++n;
      }
      if (k < cps.size()) utf8_append(out, cps[k]);
    }
    return out;
  }
  size_t pos = 0;
  int64_t n = 0;
  for (;;) {
    const size_t f = s.find(from, pos);
    if (f == std::string::npos || (count >= 0 && n >= count)) break;
    out.append(s, pos, f - pos);
    out += to;
    pos = f + from.size();
    ++n;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

class Renderer {
 public:
  Renderer(const std::string& name, const Dict& globals) : name_(name) {
    frames_.emplace_back();
    for (const auto& [k, v] : globals) frames_[0].vars[k] = v;
    install_builtins();
    frames_.emplace_back();  // the template's own top-level assignments
  }

  Flow exec(const Body& body, std::string& out) {
    for (const NodePtr& n : body) {
      const Flow f = exec_node(*n, out);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

 private:
  [[noreturn]] void fail(int line, int col, const std::string& what) const {
    raise(ErrorKind::kInvalidInput, name_, ":", line, ":", col, ": ", what);
  }
  [[noreturn]] void unsupported(int line, int col, const std::string& what) const {
    raise(ErrorKind::kUnsupported, name_, ":", line, ":", col, ": ", what,
          " is not supported by anvil's chat-template renderer");
  }

  void install_builtins() {
    auto& g = frames_[0].vars;
    auto set_default = [&](const std::string& k, Value v) {
      if (!g.count(k)) g[k] = std::move(v);
    };
    set_default("range", Value::function([](const List& a, const Dict&) {
      int64_t b = 0, e = 0, s = 1;
      ANVIL_ENSURE(!a.empty() && a.size() <= 3, kInvalidInput, "range() takes 1 to 3 arguments");
      if (a.size() == 1) e = inum(a[0]);
      else {
        b = inum(a[0]);
        e = inum(a[1]);
        if (a.size() == 3) s = inum(a[2]);
      }
      ANVIL_ENSURE(s != 0, kInvalidInput, "range() step cannot be zero");
      List out;
      for (int64_t k = b; s > 0 ? k < e : k > e; k += s) out.emplace_back(k);
      return Value(std::move(out));
    }));
    set_default("namespace", Value::function([](const List& a, const Dict& kw) {
      Dict d;
      if (!a.empty() && a[0].is_dict()) d = a[0].dict();
      for (const auto& [k, v] : kw) d.emplace_back(k, v);
      return Value::make_namespace(std::move(d));
    }));
    set_default("dict", Value::function([](const List&, const Dict& kw) { return Value(kw); }));
    set_default("raise_exception", Value::function([](const List& a, const Dict&) -> Value {
      raise(ErrorKind::kInvalidInput, "chat template raised an exception: ", a.empty() ? "" : to_output(a[0]));
    }));
    set_default("strftime_now", Value::function([](const List& a, const Dict&) {
      ANVIL_ENSURE(a.size() == 1 && a[0].is_string(), kInvalidInput, "strftime_now(format) takes one string");
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      localtime_r(&now, &tm);
      char buf[256];
      const size_t n = std::strftime(buf, sizeof buf, a[0].str().c_str(), &tm);
      return Value(std::string(buf, n));
    }));
  }

  Value lookup(const std::string& name) const {
    for (size_t k = frames_.size(); k-- > 0;) {
      auto it = frames_[k].vars.find(name);
      if (it != frames_[k].vars.end()) return it->second;
      if (frames_[k].barrier) {
        auto g = frames_[0].vars.find(name);
        return g == frames_[0].vars.end() ? Value() : g->second;
      }
    }
    return Value();
  }

  Flow exec_node(const Node& n, std::string& out) {
    switch (n.type) {
      case NodeType::kText: out += n.text; return Flow::kNormal;
      case NodeType::kPrint: out += to_output(eval(*n.expr)); return Flow::kNormal;
      case NodeType::kIf:
        for (const auto& [cond, body] : n.branches)
          if (eval(*cond).truthy()) return exec(body, out);
        return exec(n.else_body, out);
      case NodeType::kFor: return exec_for(n, out);
      case NodeType::kSet: {
        Value v = eval(*n.expr);
        if (n.attr.empty()) {
          frames_.back().vars[n.text] = std::move(v);
        } else {
          Value ns = lookup(n.text);
          if (ns.kind() != Kind::kNamespace)
            fail(n.line, n.col, "cannot assign attribute '" + n.attr + "' on '" + n.text + "' (" + type_name(ns) +
                                    "): only namespace() objects take attribute assignment");
          for (auto& [k, val] : ns.dict_mut())
            if (k == n.attr) {
              val = std::move(v);
              return Flow::kNormal;
            }
          ns.dict_mut().emplace_back(n.attr, std::move(v));
        }
        return Flow::kNormal;
      }
      case NodeType::kSetBlock: {
        std::string captured;
        exec(n.body, captured);
        frames_.back().vars[n.text] = Value(std::move(captured));
        return Flow::kNormal;
      }
      case NodeType::kMacro: {
        const Node* macro = &n;
        frames_.back().vars[n.text] = Value::function([this, macro](const List& args, const Dict& kwargs) {
          return call_macro(*macro, args, kwargs);
        });
        return Flow::kNormal;
      }
      case NodeType::kBreak: return Flow::kBreak;
      case NodeType::kContinue: return Flow::kContinue;
      case NodeType::kBlockBody: return exec(n.body, out);
    }
    return Flow::kNormal;
  }

  Value call_macro(const Node& m, const List& args, const Dict& kwargs) {
    if (args.size() > m.params.size())
      fail(m.line, m.col, "macro '" + m.text + "' takes " + std::to_string(m.params.size()) + " arguments, got " +
                              std::to_string(args.size()));
    Frame f;
    f.barrier = true;
    for (size_t k = 0; k < m.params.size(); ++k) {
      Value v;
      if (k < args.size()) v = args[k];
      else if (m.defaults[k]) v = eval(*m.defaults[k]);
      f.vars[m.params[k]] = v;
    }
    for (const auto& [k, v] : kwargs) {
      if (std::find(m.params.begin(), m.params.end(), k) == m.params.end())
        fail(m.line, m.col, "macro '" + m.text + "' has no parameter '" + k + "'");
      f.vars[k] = v;
    }
    frames_.push_back(std::move(f));
    std::string out;
    try {
      exec(m.body, out);
    } catch (...) {
      frames_.pop_back();
      throw;
    }
    frames_.pop_back();
    return Value(std::move(out));
  }

  List iterate(const Value& v, int line, int col) const {
    switch (v.kind()) {
      case Kind::kUndefined: return {};
      case Kind::kList: return v.list();
      case Kind::kDict: {
        List keys;
        for (const auto& [k, val] : v.dict()) keys.emplace_back(k);
        return keys;
      }
      case Kind::kString: {
        List chars;
        for (char32_t c : code_points(v.str())) {
          std::string s;
          utf8_append(s, c);
          chars.emplace_back(std::move(s));
        }
        return chars;
      }
      default: fail(line, col, "'" + type_name(v) + "' object is not iterable");
    }
  }

  void bind_targets(Frame& f, const Node& n, const Value& item) {
    if (n.targets.size() == 1) {
      f.vars[n.targets[0]] = item;
      return;
    }
    if (!item.is_list() || item.list().size() != n.targets.size())
      fail(n.line, n.col, "cannot unpack " + type_name(item) + " into " + std::to_string(n.targets.size()) + " loop variables");
    for (size_t k = 0; k < n.targets.size(); ++k) f.vars[n.targets[k]] = item.list()[k];
  }

  Flow exec_for(const Node& n, std::string& out) {
    List items = iterate(eval(*n.expr), n.line, n.col);
    if (n.filter) {
      List kept;
      for (const Value& item : items) {
        Frame f;
        bind_targets(f, n, item);
        frames_.push_back(std::move(f));
        const bool keep = eval(*n.filter).truthy();
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec(n.else_body, out);
    const auto len = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < len; ++k) {
      Frame f;
      bind_targets(f, n, items[static_cast<size_t>(k)]);
      Dict loop{{"index", Value(k + 1)},
                {"index0", Value(k)},
                {"revindex", Value(len - k)},
                {"revindex0", Value(len - k - 1)},
                {"first", Value(k == 0)},
                {"last", Value(k == len - 1)},
                {"length", Value(len)},
                {"previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value()},
                {"nextitem", k + 1 < len ? items[static_cast<size_t>(k + 1)] : Value()},
                {"depth", Value(int64_t{1})},
                {"depth0", Value(int64_t{0})}};
      f.vars["loop"] = Value(std::move(loop));
      frames_.push_back(std::move(f));
      Flow flow;
      try {
        flow = exec(n.body, out);
      } catch (...) {
        frames_.pop_back();
        throw;
      }
      frames_.pop_back();
      if (flow == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  Value get_attr(const Value& obj, const std::string& attr, const Expr& e) const {
    if (obj.is_undefined()) fail(e.line, e.col, "'" + attr + "' of an undefined value (the variable before '." + attr + "' is undefined)");
    if (obj.is_dict()) {
      const Value* v = obj.find(attr);
      return v ? *v : Value();
    }
    return Value();
  }

  Value get_item(const Value& obj, const Value& key, const Expr& e) const {
    if (obj.is_undefined()) fail(e.line, e.col, "subscript of an undefined value");
    if (obj.is_list() || obj.is_string()) {
      if (!is_intlike(key)) {
        if (key.is_string() && obj.is_list()) return Value();
        fail(e.line, e.col, "indices must be integers, not " + type_name(key));
      }
      int64_t i = inum(key);
      if (obj.is_list()) {
        const auto n = static_cast<int64_t>(obj.list().size());
        if (i < 0) i += n;
        if (i < 0 || i >= n) return Value();  // jinja2: out of range is undefined
        return obj.list()[static_cast<size_t>(i)];
      }
      const auto cps = code_points(obj.str());
      const auto n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Value();
      std::string s;
      utf8_append(s, cps[static_cast<size_t>(i)]);
      return Value(std::move(s));
    }
    if (obj.is_dict()) {
      if (!key.is_string()) return Value();
      const Value* v = obj.find(key.str());
      return v ? *v : Value();
    }
    return Value();
  }

  Value eval(const Expr& e) {
    switch (e.type) {
      case ExprType::kLiteral: return e.literal;
      case ExprType::kName: return lookup(e.name);
      case ExprType::kAttr: return get_attr(eval(*e.kids[0]), e.name, e);
      case ExprType::kItem: return get_item(eval(*e.kids[0]), eval(*e.kids[1]), e);
      case ExprType::kSlice: {
        const Value obj = eval(*e.kids[0]);
        const Value a = e.kids[1] ? eval(*e.kids[1]) : Value::none();
        const Value b = e.kids[2] ? eval(*e.kids[2]) : Value::none();
        const Value c = e.kids[3] ? eval(*e.kids[3]) : Value::none();
        if (obj.is_list()) {
          List out;
          for (int64_t k : slice_indices(static_cast<int64_t>(obj.list().size()), a, b, c))
            out.push_back(obj.list()[static_cast<size_t>(k)]);
          return Value(std::move(out));
        }
        if (obj.is_string()) {
          const auto cps = code_points(obj.str());
          std::vector<char32_t> out;
          for (int64_t k : slice_indices(static_cast<int64_t>(cps.size()), a, b, c)) out.push_back(cps[static_cast<size_t>(k)]);
          return Value(from_code_points(out));
        }
        fail(e.line, e.col, "cannot slice a " + type_name(obj));
      }
      case ExprType::kCall: return eval_call(e);
      case ExprType::kFilter: return eval_filter(e);
      case ExprType::kTest: {
        const bool r = eval_test(e);
        return Value(e.negated ? !r : r);
      }
      case ExprType::kNeg:
      case ExprType::kPos: {
        const Value v = eval(*e.kids[0]);
        if (!is_number(v)) fail(e.line, e.col, "bad operand type for unary " + std::string(e.type == ExprType::kNeg ? "-" : "+") + ": " + type_name(v));
        if (e.type == ExprType::kPos) return v;
        return v.kind() == Kind::kFloat ? Value(-v.as_float()) : Value(-inum(v));
      }
      case ExprType::kNot: return Value(!eval(*e.kids[0]).truthy());
      case ExprType::kAnd: {
        Value l = eval(*e.kids[0]);
        return l.truthy() ? eval(*e.kids[1]) : l;
      }
      case ExprType::kOr: {
        Value l = eval(*e.kids[0]);
        return l.truthy() ? l : eval(*e.kids[1]);
      }
      case ExprType::kCompare: {
        Value l = eval(*e.kids[0]);
        for (size_t k = 0; k < e.ops.size(); ++k) {
          Value r = eval(*e.kids[k + 1]);
          if (!compare(e.ops[k], l, r, e)) return Value(false);
          l = std::move(r);
        }
        return Value(true);
      }
      case ExprType::kCond:
        if (eval(*e.kids[0]).truthy()) return eval(*e.kids[1]);
        return e.kids[2] ? eval(*e.kids[2]) : Value();
      case ExprType::kList: {
        List out;
        for (const auto& k : e.kids) out.push_back(eval(*k));
        return Value(std::move(out));
      }
      case ExprType::kDict: {
        Dict out;
        for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
          const Value key = eval(*e.kids[k]);
          if (!key.is_string()) fail(e.line, e.col, "dict keys must be strings here");
          Value v = eval(*e.kids[k + 1]);
          bool replaced = false;
          for (auto& [kk, vv] : out)
            if (kk == key.str()) {
              vv = v;
              replaced = true;
            }
          if (!replaced) out.emplace_back(key.str(), std::move(v));
        }
        return Value(std::move(out));
      }
      case ExprType::kBinary: return eval_binary(e);
    }
    return Value();
  }

  bool compare(const std::string& op, const Value& l, const Value& r, const Expr& e) const {
    if (op == "==") return equal(l, r);
    if (op == "!=") return !equal(l, r);
    if (op == "in" || op == "not in") {
      bool found = false;
      if (r.is_string()) {
        if (!l.is_string()) fail(e.line, e.col, "'in <string>' requires a string on the left, not " + type_name(l));
        found = r.str().find(l.str()) != std::string::npos;
      } else if (r.is_list()) {
        for (const Value& x : r.list()) found = found || equal(l, x);
      } else if (r.is_dict()) {
        found = l.is_string() && r.find(l.str()) != nullptr;
      } else if (!r.is_undefined()) {
        fail(e.line, e.col, "argument of type '" + type_name(r) + "' is not iterable");
      }
      return op == "in" ? found : !found;
    }
    int c = 0;
    if (is_number(l) && is_number(r)) c = num(l) < num(r) ? -1 : num(l) > num(r) ? 1 : 0;
    else if (l.is_string() && r.is_string()) c = l.str().compare(r.str());
    else fail(e.line, e.col, "'" + op + "' not supported between " + type_name(l) + " and " + type_name(r));
    if (op == "<") return c < 0;
    if (op == ">") return c > 0;
    if (op == "<=") return c <= 0;
    return c >= 0;
  }

  Value eval_binary(const Expr& e) {
    const Value l = eval(*e.kids[0]), r = eval(*e.kids[1]);
    const std::string& op = e.name;
    if (op == "~") return Value(to_output(l) + to_output(r));
    if (op == "+") {
      if (l.is_string() && r.is_string()) return Value(l.str() + r.str());
      if (l.is_list() && r.is_list()) {
        List out = l.list();
        out.insert(out.end(), r.list().begin(), r.list().end());
        return Value(std::move(out));
      }
    }
    if (op == "*") {
      if (l.is_string() && is_intlike(r)) {
        std::string out;
        for (int64_t k = 0; k < inum(r); ++k) out += l.str();
        return Value(std::move(out));
      }
      if (l.is_list() && is_intlike(r)) {
        List out;
        for (int64_t k = 0; k < inum(r); ++k) out.insert(out.end(), l.list().begin(), l.list().end());
        return Value(std::move(out));
      }
    }
    if (!is_number(l) || !is_number(r))
      fail(e.line, e.col, "unsupported operand types for " + op + ": " + type_name(l) + " and " + type_name(r));
    const bool ints = is_intlike(l) && is_intlike(r);
    if (op == "/") {
      if (num(r) == 0) fail(e.line, e.col, "division by zero");
      return Value(num(l) / num(r));
    }
    if (op == "//" || op == "%") {
      if (num(r) == 0) fail(e.line, e.col, "division by zero");
      if (ints) {
        const int64_t a = inum(l), b = inum(r);
        int64_t q = a / b, m = a % b;
        if (m != 0 && ((m < 0) != (b < 0))) {
          --q;
          m += b;
        }
        return op == "//" ? Value(q) : Value(m);
      }
      const double q = std::floor(num(l) / num(r));
      return op == "//" ? Value(q) : Value(num(l) - q * num(r));
    }
    if (op == "**") {
      if (ints && inum(r) >= 0) {
        int64_t out = 1;
        for (int64_t k = 0; k < inum(r); ++k) out *= inum(l);
        return Value(out);
      }
      return Value(std::pow(num(l), num(r)));
    }
    if (ints) {
      if (op == "+") return Value(inum(l) + inum(r));
      if (op == "-") return Value(inum(l) - inum(r));
      return Value(inum(l) * inum(r));
    }
    if (op == "+") return Value(num(l) + num(r));
    if (op == "-") return Value(num(l) - num(r));
    return Value(num(l) * num(r));
  }

  void eval_args(const Expr& e, size_t first, List& args, Dict& kwargs) {
    for (size_t k = first; k < e.kids.size(); ++k) args.push_back(eval(*e.kids[k]));
    for (const auto& [key, x] : e.kwargs) kwargs.emplace_back(key, eval(*x));
  }
  static const Value* kwarg(const Dict& kw, const char* name) {
    for (const auto& [k, v] : kw)
      if (k == name) return &v;
    return nullptr;
  }
  // Positional argument k, else keyword `name`, else `dflt`.
  static Value arg(const List& a, const Dict& kw, size_t k, const char* name, Value dflt) {
    if (k < a.size()) return a[k];
    if (const Value* v = kwarg(kw, name)) return *v;
    return dflt;
  }

  Value eval_call(const Expr& e) {
    const Expr& callee = *e.kids[0];
    List args;
    Dict kwargs;
    if (callee.type == ExprType::kAttr) {
      const Value obj = eval(*callee.kids[0]);
      if (!(obj.is_dict() && obj.find(callee.name) && obj.find(callee.name)->kind() == Kind::kFunction)) {
        eval_args(e, 1, args, kwargs);
        return call_method(obj, callee.name, args, kwargs, callee);
      }
    }
    const Value f = eval(callee);
    if (f.kind() != Kind::kFunction) {
      if (f.is_undefined() && callee.type == ExprType::kName)
        fail(e.line, e.col, "'" + callee.name + "' is undefined (not a function this renderer knows)");
      fail(e.line, e.col, "'" + type_name(f) + "' object is not callable");
    }
    eval_args(e, 1, args, kwargs);
    return f.fn()(args, kwargs);
  }

  Value call_method(const Value& obj, const std::string& m, const List& a, const Dict& kw, const Expr& e) {
    if (obj.is_string()) {
      const std::string& s = obj.str();
      if (m == "strip" || m == "lstrip" || m == "rstrip")
        return Value(py_strip(s, arg(a, kw, 0, "chars", Value::none()), m != "rstrip", m != "lstrip"));
      if (m == "split") {
        const Value mx = arg(a, kw, 1, "maxsplit", Value(int64_t{-1}));
        return Value(py_split(s, arg(a, kw, 0, "sep", Value::none()), inum(mx)));
      }
      if (m == "startswith" || m == "endswith") {
        const Value p = arg(a, kw, 0, "prefix", Value());
        auto test = [&](const std::string& x) {
          if (m == "startswith") return s.compare(0, x.size(), x) == 0 && s.size() >= x.size();
          return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
        };
        if (p.is_string()) return Value(test(p.str()));
        if (p.is_list()) {
          for (const Value& x : p.list())
            if (x.is_string() && test(x.str())) return Value(true);
          return Value(false);
        }
        fail(e.line, e.col, m + " takes a string or a tuple of strings");
      }
      if (m == "upper") return Value(map_case(s, 1));
      if (m == "lower") return Value(map_case(s, 0));
      if (m == "title") return Value(map_case(s, 2));
      if (m == "capitalize") return Value(map_case(s, 3));
      if (m == "replace") {
        const Value from = arg(a, kw, 0, "old", Value()), to = arg(a, kw, 1, "new", Value());
        if (!from.is_string() || !to.is_string()) fail(e.line, e.col, "replace takes two strings");
        return Value(py_replace(s, from.str(), to.str(), inum(arg(a, kw, 2, "count", Value(int64_t{-1})))));
      }
      if (m == "find" || m == "count") {
        const Value sub = arg(a, kw, 0, "sub", Value());
        if (!sub.is_string()) fail(e.line, e.col, m + " takes a string");
        if (m == "find") {
          const size_t f = s.find(sub.str());
          return Value(f == std::string::npos ? int64_t{-1} : static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, f))));
        }
        if (sub.str().empty()) return Value(static_cast<int64_t>(utf8_length(s) + 1));
        int64_t n = 0;
        for (size_t p = s.find(sub.str()); p != std::string::npos; p = s.find(sub.str(), p + sub.str().size())) ++n;
        return Value(n);
      }
      if (m == "join") {
        const Value seq = arg(a, kw, 0, "iterable", Value());
        std::string out;
        bool first = true;
        for (const Value& x : iterate(seq, e.line, e.col)) {
          if (!x.is_string()) fail(e.line, e.col, "str.join: expected str items, found " + type_name(x));
          if (!first) out += s;
          out += x.str();
          first = false;
        }
        return Value(std::move(out));
      }
    }
    if (obj.is_dict()) {
      if (m == "items") {
        List out;
        for (const auto& [k, v] : obj.dict()) out.emplace_back(List{Value(k), v});
        return Value(std::move(out));
      }
      if (m == "keys" || m == "values") {
        List out;
        for (const auto& [k, v] : obj.dict()) out.push_back(m == "keys" ? Value(k) : v);
        return Value(std::move(out));
      }
      if (m == "get") {
        const Value key = arg(a, kw, 0, "key", Value());
        const Value* v = key.is_string() ? obj.find(key.str()) : nullptr;
        return v ? *v : arg(a, kw, 1, "default", Value::none());
      }
    }
    if (obj.is_undefined()) fail(e.line, e.col, "'" + m + "' of an undefined value");
    unsupported(e.line, e.col, "the method '" + type_name(obj) + "." + m + "()'");
  }

  Value eval_filter(const Expr& e) {
    const Value v = eval(*e.kids[0]);
    List a;
    Dict kw;
    eval_args(e, 1, a, kw);
    const std::string& f = e.name;
    if (f == "trim") return Value(py_strip(to_output(v), arg(a, kw, 0, "chars", Value::none()), true, true));
    if (f == "tojson") {
      const Value indent = arg(a, kw, 0, "indent", Value::none());
      return Value(to_json_text(v, indent.is_none() ? -1 : static_cast<int>(inum(indent))));
    }
    if (f == "length" || f == "count") {
      if (v.is_string()) return Value(static_cast<int64_t>(utf8_length(v.str())));
      if (v.is_list()) return Value(static_cast<int64_t>(v.list().size()));
      if (v.is_dict()) return Value(static_cast<int64_t>(v.dict().size()));
      if (v.is_undefined()) return Value(int64_t{0});
      fail(e.line, e.col, "object of type '" + type_name(v) + "' has no len()");
    }
    if (f == "string") return Value(to_output(v));
    if (f == "safe") return v;
    if (f == "upper" || f == "lower" || f == "title" || f == "capitalize")
      return Value(map_case(to_output(v), f == "lower" ? 0 : f == "upper" ? 1 : f == "title" ? 2 : 3));
    if (f == "default" || f == "d") {
      const bool boolean = arg(a, kw, 1, "boolean", Value(false)).truthy();
      if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, kw, 0, "default_value", Value(std::string()));
      return v;
    }
    if (f == "first" || f == "last") {
      const List items = iterate(v, e.line, e.col);
      if (items.empty()) return Value();
      return f == "first" ? items.front() : items.back();
    }
    if (f == "list") return Value(iterate(v, e.line, e.col));
    if (f == "reverse") {
      if (v.is_string()) {
        auto cps = code_points(v.str());
        std::reverse(cps.begin(), cps.end());
        return Value(from_code_points(cps));
      }
      List items = iterate(v, e.line, e.col);
      std::reverse(items.begin(), items.end());
      return Value(std::move(items));
    }
    if (f == "join") {
      const Value sep = arg(a, kw, 0, "d", Value(std::string()));
      const Value attr = arg(a, kw, 1, "attribute", Value::none());
      std::string out;
      bool first = true;
      for (const Value& x : iterate(v, e.line, e.col)) {
        if (!first) out += to_output(sep);
        out += to_output(attr.is_none() ? x : get_attr(x, to_output(attr), e));
        first = false;
      }
      return Value(std::move(out));
    }
    if (f == "replace") {
      const Value from = arg(a, kw, 0, "old", Value()), to = arg(a, kw, 1, "new", Value());
      return Value(py_replace(to_output(v), to_output(from), to_output(to), inum(arg(a, kw, 2, "count", Value(int64_t{-1})))));
    }
    if (f == "int") {
      if (is_number(v)) return Value(v.kind() == Kind::kFloat ? static_cast<int64_t>(v.as_float()) : inum(v));
      if (v.is_string()) {
        try {
          return Value(static_cast<int64_t>(std::stoll(py_strip(v.str(), Value::none(), true, true))));
        } catch (const std::exception&) {
        }
      }
      return arg(a, kw, 0, "default", Value(int64_t{0}));
    }
    if (f == "float") {
      if (is_number(v)) return Value(num(v));
      if (v.is_string()) {
        try {
          return Value(std::stod(v.str()));
        } catch (const std::exception&) {
        }
      }
      return arg(a, kw, 0, "default", Value(0.0));
    }
    if (f == "abs") {
      if (!is_number(v)) fail(e.line, e.col, "abs of a " + type_name(v));
      return v.kind() == Kind::kFloat ? Value(std::fabs(v.as_float())) : Value(static_cast<int64_t>(std::llabs(inum(v))));
    }
    if (f == "items") {
      if (v.is_undefined()) return Value(List{});
      if (!v.is_dict()) fail(e.line, e.col, "items of a " + type_name(v));
      List out;
      for (const auto& [k, x] : v.dict()) out.emplace_back(List{Value(k), x});
      return Value(std::move(out));
    }
    if (f == "selectattr" || f == "rejectattr") {
      const Value attr = arg(a, kw, 0, "attr", Value());
      List out;
      for (const Value& x : iterate(v, e.line, e.col)) {
        const Value field = get_attr(x, to_output(attr), e);
        bool pass;
        if (a.size() < 2) pass = field.truthy();
        else pass = apply_test(to_output(a[1]), field, List(a.begin() + 2, a.end()), e);
        if (pass == (f == "selectattr")) out.push_back(x);
      }
      return Value(std::move(out));
    }
    if (f == "map") {
      const Value* attr = kwarg(kw, "attribute");
      if (!attr) unsupported(e.line, e.col, "'map' without attribute=");
      List out;
      for (const Value& x : iterate(v, e.line, e.col)) {
        Value field = get_attr(x, to_output(*attr), e);
        if (field.is_undefined()) {
          if (const Value* d = kwarg(kw, "default")) field = *d;
        }
        out.push_back(field);
      }
      return Value(std::move(out));
    }
    unsupported(e.line, e.col, "the filter '" + f + "'");
  }

  bool apply_test(const std::string& t, const Value& v, const List& a, const Expr& e) {
    if (t == "defined") return !v.is_undefined();
    if (t == "undefined") return v.is_undefined();
    if (t == "none") return v.is_none();
    if (t == "string") return v.is_string();
    if (t == "number") return is_number(v);
    if (t == "integer") return v.kind() == Kind::kInt;
    if (t == "float") return v.kind() == Kind::kFloat;
    if (t == "boolean") return v.kind() == Kind::kBool;
    if (t == "true") return v.kind() == Kind::kBool && v.as_bool();
    if (t == "false") return v.kind() == Kind::kBool && !v.as_bool();
    if (t == "mapping") return v.kind() == Kind::kDict;
    if (t == "sequence") return v.is_list() || v.is_string() || v.kind() == Kind::kDict;
    if (t == "iterable") return v.is_list() || v.is_string() || v.kind() == Kind::kDict;
    if (t == "callable") return v.kind() == Kind::kFunction;
    if (t == "odd" || t == "even") {
      if (!is_intlike(v)) fail(e.line, e.col, "'" + t + "' test of a " + type_name(v));
      const bool odd = (inum(v) % 2) != 0;
      return t == "odd" ? odd : !odd;
    }
    if (t == "divisibleby") {
      if (a.empty() || !is_intlike(v) || !is_intlike(a[0]) || inum(a[0]) == 0) fail(e.line, e.col, "divisibleby needs integers");
      return inum(v) % inum(a[0]) == 0;
    }
    if (t == "eq" || t == "equalto" || t == "==" || t == "sameas") {
      if (a.empty()) fail(e.line, e.col, "'" + t + "' test needs an argument");
      return equal(v, a[0]) && (t != "sameas" || v.kind() == a[0].kind());
    }
    if (t == "ne" || t == "!=") return a.empty() ? true : !equal(v, a[0]);
    if (t == "in") {
      if (a.empty()) fail(e.line, e.col, "'in' test needs an argument");
      return compare("in", v, a[0], e);
    }
    if (t == "lower" || t == "upper") return v.is_string() && map_case(v.str(), t == "lower" ? 0 : 1) == v.str();
    unsupported(e.line, e.col, "the test '" + t + "'");
  }

  bool eval_test(const Expr& e) {
    const Value v = eval(*e.kids[0]);
    List a;
    Dict kw;
    eval_args(e, 1, a, kw);
    return apply_test(e.name, v, a, e);
  }

  std::string name_;
  std::vector<Frame> frames_;
};

}  // namespace

struct Template::Impl {
  std::string name;
  Body body;
};

Template::Template(std::string_view source, std::string name) : impl_(std::make_unique<Impl>()) {
  impl_->name = name;
  Lexer lexer{std::string(source), name};
  Parser parser(lexer.run(), name);
  impl_->body = parser.parse_template();
}
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

std::string Template::render(const Dict& globals) const {
  Renderer r(impl_->name, globals);
  std::string out;
  const Flow f = r.exec(impl_->body, out);
  ANVIL_ENSURE(f == Flow::kNormal, kInvalidInput, impl_->name, ": 'break' or 'continue' outside a loop");
  return out;
}

}  // namespace anvil::jinja
