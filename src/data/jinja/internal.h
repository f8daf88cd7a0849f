// The Jinja subset's internals (see jinja.h), shared by its five files: the lexer
// (lexer.cpp, jinja2's whitespace rules), the parser (parser.cpp, recursive descent with
// jinja2's precedence, building the AST below), the values (values.cpp, Python semantics),
// the builtin functions (builtins.cpp) and the renderer (renderer.cpp, a tree walk).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/jinja/jinja.h"

namespace anvil::jinja::detail {

using Kind = Value::Kind;

// ---------------------------------------------------------------------------------------
// Tokens

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

// The template's tokens; syntax errors name name:line:col.
std::vector<Token> lex(std::string source, const std::string& name);

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

// The template's body; errors and unsupported constructs name name:line:col.
Body parse(std::vector<Token> tokens, const std::string& name);

// ---------------------------------------------------------------------------------------
// Values

// Python semantics of values, for the renderer (values.cpp).
std::string type_name(const Value& v);
bool is_number(const Value& v);
double num(const Value& v);
int64_t inum(const Value& v);
bool is_intlike(const Value& v);
bool equal(const Value& a, const Value& b);
std::vector<char32_t> code_points(const std::string& s);
std::string from_code_points(const std::vector<char32_t>& cps);
// Python slice indices for a sequence of length n.
std::vector<int64_t> slice_indices(int64_t n, const Value& start, const Value& stop, const Value& step);
std::string py_strip(const std::string& s, const Value& chars, bool left, bool right);
List py_split(const std::string& s, const Value& sep, int64_t maxsplit);
std::string map_case(const std::string& s, int mode);  // 0 lower, 1 upper, 2 title, 3 capitalize
std::string py_replace(const std::string& s, const std::string& from, const std::string& to, int64_t count);
// seq[start:stop:step] of a list or a string.
Value py_slice(const Value& seq, const Value& start, const Value& stop, const Value& step);
// + and * on strings and lists (concatenation, repetition); nullopt for other operands.
std::optional<Value> py_sequence_op(const std::string& op, const Value& l, const Value& r);
// + - * / // % ** on two numbers (the divisor of / // % not zero): ints stay ints, except /;
// an int result past int64 is refused (int_overflow).
Value py_arithmetic(const std::string& op, const Value& l, const Value& r);
// Throws kUnsupported: op's result does not fit int64 (Python's ints are unbounded).
[[noreturn]] void int_overflow(const std::string& op);
// str.startswith (prefix) or str.endswith: affixes is a string or a list of them (others never match).
bool py_has_affix(const std::string& s, const Value& affixes, bool prefix);
// str.find (in code points; -1 when absent) and str.count.
int64_t py_find(const std::string& s, const std::string& sub);
int64_t py_count(const std::string& s, const std::string& sub);

// ---------------------------------------------------------------------------------------
// Builtins

// The global functions templates may call (builtins.cpp): range, namespace, dict,
// raise_exception, strftime_now.
Dict builtin_functions();

}  // namespace anvil::jinja::detail
