// The Jinja renderer (see jinja.h): a walk over the AST with Python value semantics,
// jinja2's scoping (loop frames, namespaces, macros) and the filters, tests and methods
// chat templates use.
#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_map>

#include "core/error.h"
#include "data/jinja/internal.h"
#include "data/utf8.h"

namespace anvil::jinja {

namespace detail {

enum class Flow { kNormal, kBreak, kContinue };

struct Frame {
  std::unordered_map<std::string, Value> vars;
  bool barrier = false;  // a macro call: names resolve in it, then in the globals
};

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

  // The builtin functions, each unless the caller's globals give that name.
  void install_builtins() {
    auto& g = frames_[0].vars;
    for (auto& [k, v] : builtin_functions())
      if (!g.count(k)) g[k] = std::move(v);
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
      case NodeType::kText:
        out += n.text;
        check_output(n, out);
        return Flow::kNormal;
      case NodeType::kPrint:
        out += to_output(eval(*n.expr));
        check_output(n, out);
        return Flow::kNormal;
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

  // A chat's rendering is kilobytes: one past kMaxOutput bytes is a template that prints in a
  // loop without end, refused before it fills the memory.
  void check_output(const Node& n, const std::string& out) const {
    if (out.size() > kMaxOutput) fail(n.line, n.col, cat("the template renders more than ", kMaxOutput, " bytes"));
  }

  Value call_macro(const Node& m, const List& args, const Dict& kwargs) {
    // Python stops a recursion of jinja2 macros before 200 calls deep (RecursionError); so
    // does this, where the stack would overflow.
    if (call_depth_ >= kMaxCallDepth)
      fail(m.line, m.col, cat("macro '", m.text, "' called ", kMaxCallDepth, " deep (a recursion without end?)"));
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
    ++call_depth_;
    std::string out;
    try {
      exec(m.body, out);
    } catch (...) {
      --call_depth_;
      frames_.pop_back();
      throw;
    }
    --call_depth_;
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
      case ExprType::kSlice: return eval_slice(e);
      case ExprType::kCall: return eval_call(e);
      case ExprType::kFilter: return eval_filter(e);
      case ExprType::kTest: {
        const bool r = eval_test(e);
        return Value(e.negated ? !r : r);
      }
      case ExprType::kNeg:
      case ExprType::kPos: return eval_unary(e);
      case ExprType::kNot: return Value(!eval(*e.kids[0]).truthy());
      case ExprType::kAnd: {
        Value l = eval(*e.kids[0]);
        return l.truthy() ? eval(*e.kids[1]) : l;
      }
      case ExprType::kOr: {
        Value l = eval(*e.kids[0]);
        return l.truthy() ? l : eval(*e.kids[1]);
      }
      case ExprType::kCompare: return eval_compare(e);
      case ExprType::kCond:
        if (eval(*e.kids[0]).truthy()) return eval(*e.kids[1]);
        return e.kids[2] ? eval(*e.kids[2]) : Value();
      case ExprType::kList: {
        List out;
        for (const auto& k : e.kids) out.push_back(eval(*k));
        return Value(std::move(out));
      }
      case ExprType::kDict: return eval_dict(e);
      case ExprType::kBinary: return eval_binary(e);
    }
    return Value();
  }

  Value eval_slice(const Expr& e) {
    const Value obj = eval(*e.kids[0]);
    const Value a = e.kids[1] ? eval(*e.kids[1]) : Value::none();
    const Value b = e.kids[2] ? eval(*e.kids[2]) : Value::none();
    const Value c = e.kids[3] ? eval(*e.kids[3]) : Value::none();
    if (!obj.is_list() && !obj.is_string()) fail(e.line, e.col, "cannot slice a " + type_name(obj));
    return py_slice(obj, a, b, c);
  }

  Value eval_unary(const Expr& e) {
    const Value v = eval(*e.kids[0]);
    if (!is_number(v))
      fail(e.line, e.col, "bad operand type for unary " + std::string(e.type == ExprType::kNeg ? "-" : "+") + ": " +
                              type_name(v));
    if (e.type == ExprType::kPos) return v;
    if (v.kind() == Kind::kFloat) return Value(-v.as_float());
    int64_t negated = 0;
    if (__builtin_sub_overflow(int64_t{0}, inum(v), &negated)) int_overflow("-");
    return Value(negated);
  }

  // a < b <= c: each comparison in turn, stopping at the first false.
  Value eval_compare(const Expr& e) {
    Value l = eval(*e.kids[0]);
    for (size_t k = 0; k < e.ops.size(); ++k) {
      Value r = eval(*e.kids[k + 1]);
      if (!compare(e.ops[k], l, r, e)) return Value(false);
      l = std::move(r);
    }
    return Value(true);
  }

  Value eval_dict(const Expr& e) {
    Dict out;
    for (size_t k = 0; k + 1 < e.kids.size(); k += 2) {
      const Value key = eval(*e.kids[k]);
      if (!key.is_string()) fail(e.line, e.col, "dict keys must be strings here");
      dict_set(out, key.str(), eval(*e.kids[k + 1]));
    }
    return Value(std::move(out));
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
    if (std::optional<Value> v = py_sequence_op(op, l, r)) return std::move(*v);
    if (!is_number(l) || !is_number(r))
      fail(e.line, e.col, "unsupported operand types for " + op + ": " + type_name(l) + " and " + type_name(r));
    if ((op == "/" || op == "//" || op == "%") && num(r) == 0) fail(e.line, e.col, "division by zero");
    return py_arithmetic(op, l, r);
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
    if (obj.is_string()) return string_method(obj, m, a, kw, e);
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
    no_such_method(obj, m, e);
  }

  [[noreturn]] void no_such_method(const Value& obj, const std::string& m, const Expr& e) const {
    if (obj.is_undefined()) fail(e.line, e.col, "'" + m + "' of an undefined value");
    unsupported(e.line, e.col, "the method '" + type_name(obj) + "." + m + "()'");
  }

  Value string_method(const Value& obj, const std::string& m, const List& a, const Dict& kw, const Expr& e) const {
    const std::string& s = obj.str();
    if (m == "strip" || m == "lstrip" || m == "rstrip")
      return Value(py_strip(s, arg(a, kw, 0, "chars", Value::none()), m != "rstrip", m != "lstrip"));
    if (m == "split") {
      const Value mx = arg(a, kw, 1, "maxsplit", Value(int64_t{-1}));
      return Value(py_split(s, arg(a, kw, 0, "sep", Value::none()), inum(mx)));
    }
    if (m == "startswith" || m == "endswith") {
      const Value p = arg(a, kw, 0, "prefix", Value());
      if (!p.is_string() && !p.is_list()) fail(e.line, e.col, m + " takes a string or a tuple of strings");
      return Value(py_has_affix(s, p, m == "startswith"));
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
      return Value(m == "find" ? py_find(s, sub.str()) : py_count(s, sub.str()));
    }
    if (m == "join") {
      std::string out;
      bool first = true;
      for (const Value& x : iterate(arg(a, kw, 0, "iterable", Value()), e.line, e.col)) {
        if (!x.is_string()) fail(e.line, e.col, "str.join: expected str items, found " + type_name(x));
        if (!first) out += s;
        out += x.str();
        first = false;
      }
      return Value(std::move(out));
    }
    no_such_method(obj, m, e);
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
    if (f == "replace") {
      const Value from = arg(a, kw, 0, "old", Value()), to = arg(a, kw, 1, "new", Value());
      return Value(py_replace(to_output(v), to_output(from), to_output(to), inum(arg(a, kw, 2, "count", Value(int64_t{-1})))));
    }
    if (std::optional<Value> r = sequence_filter(f, v, a, kw, e)) return *r;
    if (std::optional<Value> r = attribute_filter(f, v, a, kw, e)) return *r;
    if (std::optional<Value> r = number_filter(f, v, a, kw, e)) return *r;
    unsupported(e.line, e.col, "the filter '" + f + "'");
  }

  // first, last, list, reverse, join, items; nullopt for another filter.
  std::optional<Value> sequence_filter(const std::string& f, const Value& v, const List& a, const Dict& kw,
                                       const Expr& e) {
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
    if (f == "items") {
      if (v.is_undefined()) return Value(List{});
      if (!v.is_dict()) fail(e.line, e.col, "items of a " + type_name(v));
      List out;
      for (const auto& [k, x] : v.dict()) out.emplace_back(List{Value(k), x});
      return Value(std::move(out));
    }
    return std::nullopt;
  }

  // selectattr, rejectattr, map; nullopt for another filter.
  std::optional<Value> attribute_filter(const std::string& f, const Value& v, const List& a, const Dict& kw,
                                        const Expr& e) {
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
    return std::nullopt;
  }

  // int, float, abs; nullopt for another filter.
  std::optional<Value> number_filter(const std::string& f, const Value& v, const List& a, const Dict& kw,
                                     const Expr& e) {
    if (f == "int") {
      if (v.kind() == Kind::kFloat) {  // Python: nan is not a number (the default), inf and 1e300 are past int64
        if (std::isnan(v.as_float())) return arg(a, kw, 0, "default", Value(int64_t{0}));
        if (!(std::fabs(v.as_float()) < 9223372036854775808.0)) int_overflow("int");
        return Value(static_cast<int64_t>(v.as_float()));
      }
      if (is_number(v)) return Value(inum(v));
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
      if (v.kind() == Kind::kFloat) return Value(std::fabs(v.as_float()));
      if (inum(v) == INT64_MIN) int_overflow("abs");
      return Value(static_cast<int64_t>(std::llabs(inum(v))));
    }
    return std::nullopt;
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
  static constexpr size_t kMaxOutput = size_t{1} << 24;
  static constexpr int kMaxCallDepth = 200;
  std::vector<Frame> frames_;
  int call_depth_ = 0;
};

}  // namespace detail

struct Template::Impl {
  std::string name;
  detail::Body body;
};

Template::Template(std::string_view source, std::string name) : impl_(std::make_unique<Impl>()) {
  impl_->name = name;
  impl_->body = detail::parse(detail::lex(std::string(source), name), name);
}
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;
Template::~Template() = default;

std::string Template::render(const Dict& globals) const {
  detail::Renderer r(impl_->name, globals);
  std::string out;
  const detail::Flow f = r.exec(impl_->body, out);
  ANVIL_ENSURE(f == detail::Flow::kNormal, kInvalidInput, impl_->name, ": 'break' or 'continue' outside a loop");
  return out;
}

}  // namespace anvil::jinja
