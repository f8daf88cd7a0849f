// data/jinja + data/chat_template: transformers' apply_chat_template renderings of the Qwen3
// template (chat_golden.json), the Jinja semantics templates rely on (Python slicing, string
// methods, scoping, whitespace control), and errors that name the construct and its place.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "testing.h"

namespace anvil {
namespace {

std::string qwen3_dir() { return testing::shared_dir() + "/fixtures/qwen3-tokenizer"; }

OrderedJson golden_chats() {
  return OrderedJson::parse(read_file(testing::shared_dir() + "/fixtures/tokenizer/chat_golden.json")).at("chats");
}

TEST(ChatTemplate, Qwen3MatchesGoldenRenderingsIdsAndGenerationPrompts) {
  const ChatTemplate tmpl = ChatTemplate::load(qwen3_dir());
  const Tokenizer tok = Tokenizer::load(qwen3_dir());
  const OrderedJson chats = golden_chats();
  ASSERT_GT(chats.size(), 10u);
  for (size_t c = 0; c < chats.size(); ++c) {
    const OrderedJson& chat = chats[c];
    const OrderedJson& messages = chat.at("messages");
    const std::string rendered = tmpl.render(messages, false);
    ASSERT_EQ(rendered, chat.at("rendered").get<std::string>()) << "chat " << c;
    EXPECT_EQ(tok.encode(rendered), chat.at("ids").get<std::vector<int32_t>>()) << "chat " << c;
    // generation_prompts: the messages before each assistant turn, add_generation_prompt=True.
    size_t g = 0;
    for (size_t i = 0; i < messages.size(); ++i) {
      if (messages[i].at("role") != "assistant") continue;
      OrderedJson before = OrderedJson::array();
      for (size_t k = 0; k < i; ++k) before.push_back(messages[k]);
      ASSERT_LT(g, chat.at("generation_prompts").size());
      EXPECT_EQ(tmpl.render(before, true), chat.at("generation_prompts")[g].get<std::string>())
          << "chat " << c << " turn " << i;
      ++g;
    }
    EXPECT_EQ(g, chat.at("generation_prompts").size());
  }
}

TEST(ChatTemplate, AssistantSpansCoverContentAndEos) {
  const ChatTemplate tmpl = ChatTemplate::load(qwen3_dir());
  const OrderedJson messages = OrderedJson::parse(
      R"([{"role":"user","content":"Hi"},{"role":"assistant","content":"Hello"},
          {"role":"user","content":"2+2?"},{"role":"assistant","content":"4"}])");
  const std::string r = tmpl.render(messages, false);
  const auto spans = tmpl.assistant_spans(messages, r);
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(r.substr(spans[0].first, spans[0].second - spans[0].first), "Hello<|im_end|>");
  EXPECT_EQ(r.substr(spans[1].first, spans[1].second - spans[1].first), "<think>\n\n</think>\n\n4<|im_end|>");
}

std::string render(const std::string& src, const OrderedJson& vars = OrderedJson::object()) {
  jinja::Dict d;
  for (auto it = vars.begin(); it != vars.end(); ++it) d.emplace_back(it.key(), jinja::Value::from_json(it.value()));
  return jinja::Template(src).render(d);
}

TEST(Jinja, PythonSemantics) {
  EXPECT_EQ(render("{{ [1,2,3,4][::-1] }}|{{ [1,2,3,4][1:-1] }}|{{ 'abcdef'[::2] }}|{{ 'héllo'[-3:] }}"),
            "[4, 3, 2, 1]|[2, 3]|ace|llo");
  EXPECT_EQ(render("{{ ' a b  '.split() }}{{ 'a,b,,c'.split(',') }}{{ 'a b c'.split(' ', 1) }}"),
            "['a', 'b']['a', 'b', '', 'c']['a', 'b c']");
  EXPECT_EQ(render("{{ '\\n x \\n'.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'xxaxx'.rstrip('x') }}|{{ '  t '|trim }}"),
            "x|axx|xxa|t");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x','c')) }}{{ 'a' in 'cat' }}{{ 3 not in [1,2] }}"),
            "TrueTrueTrueTrue");
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.0 }} {{ 1e-5 }} {{ 1e16 }}"),
            "3 -4 2 3.5 1024 1.0 1e-05 1e+16");
  EXPECT_EQ(render("{{ none }} {{ true }} {{ undefined_thing }}|{{ {'a': 1, 'b': [none, 'x']} }}"),
            "None True |{'a': 1, 'b': [None, 'x']}");
  EXPECT_EQ(render(R"({{ {"b": 1, "a": "é\"\n", "c": [1.5, true, none]}|tojson }}|{{ [1,{"k":2}]|tojson(indent=2) }})"),
            "{\"b\": 1, \"a\": \"é\\\"\\n\", \"c\": [1.5, true, null]}|[\n  1,\n  {\n    \"k\": 2\n  }\n]");
  EXPECT_EQ(render("{{ x|length }} {{ 'héllo'|length }} {{ x|first }} {{ x|last }} {{ x|join('-') }}", {{"x", {3, 4, 5}}}),
            "3 5 3 5 3-4-5");
}

TEST(Jinja, LoopsScopesNamespacesMacros) {
  EXPECT_EQ(render("{% for x in xs %}{{ loop.index0 }}{{ x }}{% if loop.first %}F{% endif %}{% if loop.last %}L{% endif %}"
                   "{% endfor %}",
                   {{"xs", {"a", "b", "c"}}}),
            "0aF1b2cL");
  // set inside a loop does not leak; a namespace does.
  EXPECT_EQ(render("{% set a = 1 %}{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set a = 5 %}"
                   "{% set ns.n = ns.n + i %}{% endfor %}{{ a }} {{ ns.n }}"),
            "1 3");
  EXPECT_EQ(render("{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 4 %}{% break %}{% endif %}"
                   "{{ i }}{% endfor %}"),
            "013");
  EXPECT_EQ(render("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{% for x in [] %}x{% else %}empty{% endfor %}",
                   {{"d", {{"z", 1}, {"a", 2}}}}),
            "z=1;a=2;empty");
  EXPECT_EQ(render("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('A') }} {{ greet('B', punct='?') }}"),
            "Hi A! Hi B?");
  EXPECT_EQ(render("{{ 'yes' if x is defined and x is not none else 'no' }}{{ y is string }}{{ 3 is odd }}", {{"y", "s"}}),
            "noTrueTrue");
  EXPECT_EQ(render("{% set s %}in{{ 1 + 1 }}{% endset %}[{{ s }}]"), "[in2]");
}

TEST(Jinja, WhitespaceControlAsJinja2WithTrimAndLstripBlocks) {
  // trim_blocks drops the newline after a block tag; lstrip_blocks the indentation before it.
  EXPECT_EQ(render("a\n  {% if true %}\n  b\n  {% endif %}\nc\n"), "a\n  b\nc");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif %}"), "ab");
  EXPECT_EQ(render("x {{- 'y' -}} \n z"), "xyz");
  EXPECT_EQ(render("a\n  {%+ if true %}b{% endif %}"), "a\n  b");
  EXPECT_EQ(render("{# comment #}\nline"), "line");
}

void expect_error(const std::string& src, ErrorKind kind, const std::string& needle) {
  try {
    render(src);
    FAIL() << "no error for " << src;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Jinja, UnsupportedConstructsNameThemselvesAndTheirPlace) {
  expect_error("ok\n  {% include 'x.j2' %}", ErrorKind::kUnsupported, "chat_template:2:3: the statement '{% include %}'");
  expect_error("{{ x|wordwrap }}", ErrorKind::kUnsupported, "chat_template:1:5: the filter 'wordwrap'");
  expect_error("{{ 'a'.zfill(3) }}", ErrorKind::kUnsupported, "the method 'str.zfill()'");
  expect_error("{{ 1 is prime }}", ErrorKind::kUnsupported, "the test 'prime'");
  expect_error("{% if x %}", ErrorKind::kInvalidInput, "missing '{% endif %}'");
  expect_error("{{ raise_exception('bad roles') }}", ErrorKind::kInvalidInput, "bad roles");
  expect_error("{{ a.b.c }}", ErrorKind::kInvalidInput, "undefined");
}

// A template's ints are int64 and its ranges those of jinja2's sandbox, which transformers
// renders under: results up to the limits render as jinja2 renders them (the first line, from
// jinja2 3.1); one past is refused, never wrapped or left to fill the memory or the stack.
TEST(Jinja, IntegersRangesAndRecursionStopAtTheirLimits) {
  EXPECT_EQ(render("{{ 2 ** 62 }} {{ 3 ** 39 }} {{ -7 // -1 }} {{ -7 % -1 }} {{ range(100000)|length }} "
                   "{{ range(9223372036854775800, 9223372036854775807, 5)|list }} {{ (-9223372036854775807 - 1)|string }} "
                   "{{ 'abc'[1::9223372036854775807] }} {{ 2.5e9|int }} {{ 'ab' * 3 }}"),
            "4611686018427387904 4052555153018976267 7 0 100000 [9223372036854775800, 9223372036854775805] "
            "-9223372036854775808 b 2500000000 ababab");
  for (const char* src : {"{{ 2 ** 63 }}", "{{ 9223372036854775807 + 1 }}", "{{ (-9223372036854775807 - 1) - 1 }}",
                          "{{ 4294967296 * 4294967296 }}", "{{ (-9223372036854775807 - 1) // -1 }}",
                          "{{ -(-9223372036854775807 - 1) }}", "{{ (-9223372036854775807 - 1)|abs }}", "{{ 1e300|int }}"})
    expect_error(src, ErrorKind::kUnsupported, "integer overflow");
  EXPECT_EQ(render("{{ 2e308 }} {{ 1e-400 }} {{ '\\x41\\u00e9' }}"), "inf 0.0 A\u00e9");  // literals as Python reads them
  expect_error("{{ 9223372036854775808 }}", ErrorKind::kUnsupported, "the integer 9223372036854775808 is past int64");
  expect_error("{{ '\\xzz' }}", ErrorKind::kInvalidInput, "truncated \\x escape");
  expect_error("{{ range(100001)|length }}", ErrorKind::kInvalidInput, "range() of more than 100000 items");
  expect_error("{{ 'ab' * 10000000 }}", ErrorKind::kUnsupported, "a repetition of 2 elements 10000000 times");
  expect_error("{% for i in range(100000) %}{{ 'x' * 100000 }}{% endfor %}", ErrorKind::kInvalidInput,
               "renders more than 16777216 bytes");
  expect_error("{% macro g(h) %}{{ h(h) }}{% endmacro %}{{ g(g) }}", ErrorKind::kInvalidInput, "called 200 deep");
}

}  // namespace
}  // namespace anvil
