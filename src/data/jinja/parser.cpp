// The Jinja parser (see internal.h): recursive descent over the tokens with jinja2's
// operator precedence, into the AST.
#include <algorithm>
#include <initializer_list>
#include <string>

#include "core/error.h"
#include "data/jinja/internal.h"

namespace anvil::jinja::detail {

namespace {

class Parser {
 public:
  Parser(std::vector<Token> tokens, std::string name) : t_(std::move(tokens)), name_(std::move(name)) {}

  Body parse_template() {
    Body body = parse_body({});
    if (cur().type != Tok::kEof) fail(cur(), "unexpected '{% " + peek_name() + " %}'");
    return body;
  }

 private:
  // The depth of the tree being parsed: a nested expression or block, and each link of a chain
  // (a + b + c, a.b[c](d), x|f|g, a if b else c if d ...) one level. Rendering and freeing walk
  // the tree recursively, so its depth stays well within the stack; CPython refuses deeper code
  // (200 nested parentheses, 100 nested blocks), so jinja2 renders no template this refuses.
  static constexpr int kMaxDepth = 500;
  class Depth {  // adds its levels to the parser's depth while it lives
   public:
    explicit Depth(Parser& p) : p_(p) {}
    Depth(const Depth&) = delete;
    Depth& operator=(const Depth&) = delete;
    ~Depth() { p_.depth_ -= levels_; }
    void add(const Token& t) {
      ++levels_;
      if (++p_.depth_ > kMaxDepth) p_.fail(t, cat("nested more than ", kMaxDepth, " levels deep"));
    }

   private:
    Parser& p_;
    int levels_ = 0;
  };

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
    Depth depth(*this);
    depth.add(begin);
    const Token& kw = cur();
    if (kw.type != Tok::kName) fail(kw, "expected a statement name" + found());
    const std::string k = kw.text;
    ++i_;
    auto n = at<Node>(begin);
    if (k == "if") {
      parse_if(*n);
    } else if (k == "for") {
      parse_for(*n);
    } else if (k == "set") {
      parse_set(*n);
    } else if (k == "macro") {
      parse_macro(*n);
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

  // {% if %} ... {% elif %} ... {% else %} ... {% endif %}, from the condition on.
  void parse_if(Node& n) {
    n.type = NodeType::kIf;
    ExprPtr cond = parse_expr();
    expect_block_end();
    for (;;) {
      Body b = parse_body({"elif", "else", "endif"});
      n.branches.emplace_back(std::move(cond), std::move(b));
      ++i_;  // {%
      const std::string which = take_name();
      if (which == "elif") {
        cond = parse_expr();
        expect_block_end();
        continue;
      }
      expect_block_end();
      if (which == "else") {
        n.else_body = parse_body({"endif"});
        end_tag("endif");
      }
      break;
    }
  }

  // {% for targets in expr [if filter] %} ... {% else %} ... {% endfor %}, from the targets on.
  void parse_for(Node& n) {
    n.type = NodeType::kFor;
    n.targets.push_back(take_name());
    while (is_op(",")) {
      ++i_;
      n.targets.push_back(take_name());
    }
    expect_name("in");
    n.expr = parse_or_expr(/*no_cond=*/true);
    if (is_name("if")) {
      ++i_;
      n.filter = parse_expr();
    }
    if (is_name("recursive")) unsupported(cur(), "'recursive' for loops");
    expect_block_end();
    n.body = parse_body({"else", "endfor"});
    ++i_;
    const std::string which = take_name();
    expect_block_end();
    if (which == "else") {
      n.else_body = parse_body({"endfor"});
      end_tag("endfor");
    }
  }

  // {% set name[.attr] = expr %} or the block {% set name %} ... {% endset %}, from the name on.
  void parse_set(Node& n) {
    n.text = take_name();
    if (is_op(".")) {
      ++i_;
      n.attr = take_name();
    }
    if (is_op(",")) unsupported(cur(), "'set' with several targets");
    if (cur().type == Tok::kBlockEnd) {
      if (!n.attr.empty()) fail(cur(), "a block 'set' takes a plain name");
      ++i_;
      n.type = NodeType::kSetBlock;
      n.body = parse_body({"endset"});
      end_tag("endset");
    } else {
      n.type = NodeType::kSet;
      expect_op("=");
      n.expr = parse_expr();
      expect_block_end();
    }
  }

  // {% macro name(params, with = defaults) %} ... {% endmacro %}, from the name on.
  void parse_macro(Node& n) {
    n.type = NodeType::kMacro;
    n.text = take_name();
    expect_op("(");
    while (!is_op(")")) {
      n.params.push_back(take_name());
      if (is_op("=")) {
        ++i_;
        n.defaults.push_back(parse_expr());
      } else {
        n.defaults.push_back(nullptr);
      }
      if (!is_op(")")) expect_op(",");
    }
    ++i_;
    expect_block_end();
    n.body = parse_body({"endmacro"});
    end_tag("endmacro");
  }

  // Expressions, in jinja2's precedence order.
  ExprPtr parse_expr() {
    Depth depth(*this);
    depth.add(cur());
    return parse_or_expr(false);
  }

  ExprPtr parse_or_expr(bool no_cond) {
    ExprPtr e = parse_or();
    if (!no_cond && is_name("if")) {
      const Token& t = next_tok();
      Depth depth(*this);
      depth.add(t);
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
  // A left-associative chain of operands joined by any of ops: keywords for kOr and kAnd (the
  // Expr unnamed), operator tokens for kBinary (the Expr named by its operator).
  template <class Operand>
  ExprPtr left_chain(ExprType type, std::initializer_list<const char*> ops, Operand&& operand) {
    const bool keyword = type != ExprType::kBinary;
    const auto at_op = [&] {
      for (const char* op : ops)
        if (keyword ? is_name(op) : is_op(op)) return true;
      return false;
    };
    Depth depth(*this);
    ExprPtr l = operand();
    while (at_op()) {
      const Token& t = next_tok();
      depth.add(t);
      l = binary(type, t, std::move(l), operand(), keyword ? std::string() : t.text);
    }
    return l;
  }
  ExprPtr parse_or() { return left_chain(ExprType::kOr, {"or"}, [this] { return parse_and(); }); }
  ExprPtr parse_and() { return left_chain(ExprType::kAnd, {"and"}, [this] { return parse_not(); }); }
  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token& t = next_tok();
      Depth depth(*this);
      depth.add(t);
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
  ExprPtr parse_math1() { return left_chain(ExprType::kBinary, {"+", "-"}, [this] { return parse_concat(); }); }
  ExprPtr parse_concat() { return left_chain(ExprType::kBinary, {"~"}, [this] { return parse_math2(); }); }
  ExprPtr parse_math2() {
    return left_chain(ExprType::kBinary, {"*", "/", "//", "%"}, [this] { return parse_pow(); });
  }
  ExprPtr parse_pow() { return left_chain(ExprType::kBinary, {"**"}, [this] { return parse_unary(true); }); }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr node;
    Depth depth(*this);
    if (is_op("-") || is_op("+")) {
      const Token& t = next_tok();
      depth.add(t);
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
  // The items of a list or dict literal up to `close` (consumed), comma separated, a trailing
  // comma allowed: expressions, or key: value pairs when `pairs`.
  void parse_items(Expr& e, const char* close, bool pairs) {
    while (!is_op(close)) {
      e.kids.push_back(parse_expr());
      if (pairs) {
        expect_op(":");
        e.kids.push_back(parse_expr());
      }
      if (!is_op(close)) expect_op(",");
    }
    ++i_;
  }
  // What follows "(" (consumed), up to its ")": an expression, or a tuple (a list for our
  // purposes) into e.
  ExprPtr parse_parenthesized(ExprPtr e) {
    if (is_op(")")) {
      ++i_;
      e->type = ExprType::kList;
      return e;
    }
    ExprPtr inner = parse_expr();
    if (!is_op(",")) {
      expect_op(")");
      return inner;
    }
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
          return parse_parenthesized(std::move(e));
        }
        if (t.text == "[") {
          ++i_;
          e->type = ExprType::kList;
          parse_items(*e, "]", false);
          return e;
        }
        if (t.text == "{") {
          ++i_;
          e->type = ExprType::kDict;
          parse_items(*e, "}", true);
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
  // callee(args...), the call placed at token t.
  ExprPtr parse_call(const Token& t, ExprPtr callee) {
    auto e = at<Expr>(t);
    e->type = ExprType::kCall;
    e->kids.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }
  ExprPtr parse_postfix(ExprPtr node) {
    Depth depth(*this);
    for (;;) {
      const Token& t = cur();
      if (is_op(".") || is_op("[") || is_op("(")) depth.add(t);
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
        node = parse_call(t, std::move(node));
      } else {
        return node;
      }
    }
  }
  ExprPtr parse_filter_expr(ExprPtr node) {
    Depth depth(*this);
    for (;;) {
      if (is_op("|") || is_name("is") || is_op("(")) depth.add(cur());
      if (is_op("|")) {
        const Token& t = next_tok();
        auto e = at<Expr>(t);
        e->type = ExprType::kFilter;
        e->name = take_name();
        while (is_op(".")) {
          ++i_;
          e->name.append(".").append(take_name());
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
        node = parse_call(cur(), std::move(node));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  std::string name_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Body parse(std::vector<Token> tokens, const std::string& name) {
  Parser parser(std::move(tokens), name);
  return parser.parse_template();
}

}  // namespace anvil::jinja::detail
