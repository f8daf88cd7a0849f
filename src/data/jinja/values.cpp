// Jinja values (see jinja.h): construction, truth, str() and repr() and json.dumps as
// Python prints them, and the Python semantics the renderer uses (internal.h).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include "core/error.h"
#include "data/case_map.h"
#include "data/jinja/internal.h"
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
    if (digits.size() > 1) out.append(".").append(digits, 1);
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

void json_newline(std::string& out, int indent, int depth) {
  out.push_back('\n');
  out.append(static_cast<size_t>(indent * depth), ' ');
}

// A JSON array or object of n items (`item` writes item k): with indent >= 0, one item a
// line at depth + 1; else on one line, as json.dumps separates them.
template <class Item>
void json_dump_items(std::string& out, char open, char close, size_t n, int indent, int depth, const Item& item) {
  out.push_back(open);
  if (n == 0) {
    out.push_back(close);
    return;
  }
  for (size_t k = 0; k < n; ++k) {
    if (k) out += indent >= 0 ? "," : ", ";
    if (indent >= 0) json_newline(out, indent, depth + 1);
    item(k);
  }
  if (indent >= 0) json_newline(out, indent, depth);
  out.push_back(close);
}

void json_dump(std::string& out, const Value& v, int indent, int depth) {
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
      const List& l = v.list();
      json_dump_items(out, '[', ']', l.size(), indent, depth,
                      [&](size_t k) { json_dump(out, l[k], indent, depth + 1); });
      return;
    }
    case Kind::kDict:
    case Kind::kNamespace: {
      const Dict& d = v.dict();
      json_dump_items(out, '{', '}', d.size(), indent, depth, [&](size_t k) {
        json_string(out, d[k].first);
        out += ": ";
        json_dump(out, d[k].second, indent, depth + 1);
      });
      return;
    }
    case Kind::kUndefined: raise(ErrorKind::kInvalidInput, "tojson: an undefined value is not JSON serializable");
    case Kind::kFunction: raise(ErrorKind::kInvalidInput, "tojson: a function is not JSON serializable");
  }
}

}  // namespace

void dict_set(Dict& d, const std::string& key, Value v) {
  bool replaced = false;
  for (auto& [k, old] : d)
    if (k == key) {
      old = v;
      replaced = true;
    }
  if (!replaced) d.emplace_back(key, std::move(v));
}

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

namespace detail {

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
    for (int64_t k = b; k < e; k = e - k > st ? k + st : e) out.push_back(k);  // k + st could overflow
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

Value py_slice(const Value& seq, const Value& start, const Value& stop, const Value& step) {
  if (seq.is_list()) {
    List out;
    for (int64_t k : slice_indices(static_cast<int64_t>(seq.list().size()), start, stop, step))
      out.push_back(seq.list()[static_cast<size_t>(k)]);
    return Value(std::move(out));
  }
  const auto cps = code_points(seq.str());
  std::vector<char32_t> out;
  for (int64_t k : slice_indices(static_cast<int64_t>(cps.size()), start, stop, step))
    out.push_back(cps[static_cast<size_t>(k)]);
  return Value(from_code_points(out));
}

namespace {

// The most elements (bytes of a string, items of a list) a repetition makes: far past any chat
// rendering, and short of filling the machine's memory.
constexpr uint64_t kMaxRepeat = uint64_t{1} << 24;

// base ** exp by squaring: a few checked steps, where a loop of exp multiplications ran for
// as long as exp said.
int64_t int_pow(int64_t base, int64_t exp) {
  int64_t out = 1;
  while (exp > 0) {
    if ((exp & 1) && __builtin_mul_overflow(out, base, &out)) int_overflow("**");
    exp >>= 1;
    if (exp > 0 && __builtin_mul_overflow(base, base, &base)) int_overflow("**");
  }
  return out;
}

}  // namespace

void int_overflow(const std::string& op) {
  raise(ErrorKind::kUnsupported, "integer overflow in '", op,
        "': the chat-template renderer's integers are 64-bit, Python's unbounded");
}

std::optional<Value> py_sequence_op(const std::string& op, const Value& l, const Value& r) {
  if (op == "+") {
    if (l.is_string() && r.is_string()) return Value(l.str() + r.str());
    if (l.is_list() && r.is_list()) {
      List out = l.list();
      out.insert(out.end(), r.list().begin(), r.list().end());
      return Value(std::move(out));
    }
  }
  if (op == "*") {
    // A repetition is sized before it is made: one past kMaxRepeat elements is refused, where
    // Python would fill its memory.
    const auto check = [&](size_t unit) {
      ANVIL_ENSURE(inum(r) <= 0 || unit <= kMaxRepeat / static_cast<uint64_t>(inum(r)), kUnsupported,
                   "a repetition of ", unit, " elements ", inum(r), " times (more than ", kMaxRepeat, ")");
    };
    if (l.is_string() && is_intlike(r)) {
      check(l.str().size());
      std::string out;
      for (int64_t k = 0; k < inum(r); ++k) out += l.str();
      return Value(std::move(out));
    }
    if (l.is_list() && is_intlike(r)) {
      check(l.list().size());
      List out;
      for (int64_t k = 0; k < inum(r); ++k) out.insert(out.end(), l.list().begin(), l.list().end());
      return Value(std::move(out));
    }
  }
  return std::nullopt;
}

namespace {

// Python's // and %: the quotient rounds toward minus infinity, the remainder takes the divisor's sign.
Value floor_div_mod(const std::string& op, const Value& l, const Value& r, bool ints) {
  if (ints) {
    const int64_t a = inum(l), b = inum(r);
    if (b == -1) {  // a // -1 is -a, past int64 for its smallest; a % -1 is 0
      int64_t q = 0;
      if (__builtin_sub_overflow(int64_t{0}, a, &q)) int_overflow(op);
      return op == "//" ? Value(q) : Value(int64_t{0});
    }
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

}  // namespace

Value py_arithmetic(const std::string& op, const Value& l, const Value& r) {
  const bool ints = is_intlike(l) && is_intlike(r);
  if (op == "/") return Value(num(l) / num(r));
  if (op == "//" || op == "%") return floor_div_mod(op, l, r, ints);
  if (op == "**") {
    if (ints && inum(r) >= 0) return Value(int_pow(inum(l), inum(r)));
    return Value(std::pow(num(l), num(r)));
  }
  if (ints) {
    const int64_t a = inum(l), b = inum(r);
    int64_t v = 0;
    const bool over = op == "+" ? __builtin_add_overflow(a, b, &v)
                      : op == "-" ? __builtin_sub_overflow(a, b, &v)
                                  : __builtin_mul_overflow(a, b, &v);
    if (over) int_overflow(op);
    return Value(v);
  }
  if (op == "+") return Value(num(l) + num(r));
  if (op == "-") return Value(num(l) - num(r));
  return Value(num(l) * num(r));
}

bool py_has_affix(const std::string& s, const Value& affixes, bool prefix) {
  auto test = [&](const std::string& x) {
    if (prefix) return s.compare(0, x.size(), x) == 0 && s.size() >= x.size();
    return s.size() >= x.size() && s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affixes.is_string()) return test(affixes.str());
  for (const Value& x : affixes.list())
    if (x.is_string() && test(x.str())) return true;
  return false;
}

int64_t py_find(const std::string& s, const std::string& sub) {
  const size_t f = s.find(sub);
  return f == std::string::npos ? int64_t{-1} : static_cast<int64_t>(utf8_length(std::string_view(s).substr(0, f)));
}

int64_t py_count(const std::string& s, const std::string& sub) {
  if (sub.empty()) return static_cast<int64_t>(utf8_length(s) + 1);
  int64_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
  return n;
}

}  // namespace detail

}  // namespace anvil::jinja
