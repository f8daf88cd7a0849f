// A Jinja2 subset for chat templates: enough of the language that the Qwen2.5, Qwen3 and
// Llama 3/3.1 templates (and most others on the Hub) render exactly as transformers renders
// them (jinja2 with trim_blocks, lstrip_blocks, loopcontrols; Python semantics for values).
//
// Why our own: the renderer sits in the data path of a native binary with no Python; it
// must match Python's str/list/dict behaviour (slicing with negative steps, str.split and
// strip, repr of floats and containers, json.dumps for tojson) byte for byte.
//
// Supported: output {{ }}, comments, whitespace control (-, +), if/elif/else, for (else,
// inline filter, tuple targets, loop.* variables), set (names, namespace attributes, block
// set), macro, break/continue, generation (rendered as its body); expressions with literals,
// lists, dicts, attribute/item access, slicing, calls, filters, tests, arithmetic, ~, and/or/not,
// comparisons (chained), `in`, conditional expressions. Anything else (include, extends,
// call blocks, an unknown filter, test or method) is an Error naming it and its line:col;
// the renderer never guesses.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace anvil::jinja {

class Value;
using List = std::vector<Value>;
using Dict = std::vector<std::pair<std::string, Value>>;  // insertion order, like a Python dict
using Function = std::function<Value(const List& args, const Dict& kwargs)>;

class Value {
 public:
  enum class Kind : uint8_t { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kNamespace, kFunction };

  Value() = default;  // undefined
  static Value none();
  Value(bool b);                 // NOLINT(google-explicit-constructor)
  Value(int64_t i);              // NOLINT
  Value(int i) : Value(static_cast<int64_t>(i)) {}  // NOLINT
  Value(double f);               // NOLINT
  Value(std::string s);          // NOLINT
  Value(const char* s) : Value(std::string(s)) {}  // NOLINT
  Value(List l);                 // NOLINT
  Value(Dict d);                 // NOLINT
  static Value make_namespace(Dict d);
  static Value function(Function f);
  // nlohmann::ordered_json keeps key order, as Python's json.loads does.
  static Value from_json(const nlohmann::ordered_json& j);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict || kind_ == Kind::kNamespace; }
  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  double as_float() const { return f_; }
  const std::string& str() const { return *s_; }
  const List& list() const { return *l_; }
  List& list_mut() { return *l_; }
  const Dict& dict() const { return *d_; }
  Dict& dict_mut() { return *d_; }  // namespaces are shared: assignment is visible to all
  const Function& fn() const { return *fn_; }

  const Value* find(std::string_view key) const;  // dict/namespace member, or nullptr
  bool truthy() const;                            // Python truth value

 private:
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<std::string> s_;
  std::shared_ptr<List> l_;
  std::shared_ptr<Dict> d_;
  std::shared_ptr<Function> fn_;
};

// d[key] = v as a Python dict does it: the value of an existing key replaced in place, else appended.
void dict_set(Dict& d, const std::string& key, Value v);

// str(v) as Python prints it ("None", "True", "2.5", "[1, 'a']"); undefined prints "".
std::string to_output(const Value& v);
// json.dumps(v, ensure_ascii=False, indent=indent) (indent < 0: none), key order kept.
std::string to_json_text(const Value& v, int indent = -1);

class Template {
 public:
  // Parses the whole template up front: syntax errors and unsupported constructs surface here.
  explicit Template(std::string_view source, std::string name = "chat_template");
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;
  ~Template();

  // globals: the template's variables (messages, add_generation_prompt, bos_token, ...).
  std::string render(const Dict& globals) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace anvil::jinja
