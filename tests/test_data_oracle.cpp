// Parity against the Python Hugging Face stack on thousands of generated inputs: `anvil
// tokenize` against tokenizers (ids, decode) and `anvil tokenize --chat` against transformers'
// apply_chat_template (renderings, ids; generation prompts through ChatTemplate::render), for
// the Qwen3 and Llama 3.1 tokenizers and templates (shared fixtures), and Jinja edge cases
// (tests/oracle/tokenizer_oracle.py runs the oracle; testing.h says where its Python is).
//
// Inputs are generated from a fixed seed: random text across scripts (Latin, Cyrillic, Greek,
// CJK, Arabic, Devanagari, Thai, Hangul), emoji with ZWJ, skin tones and flags, combining
// marks, whitespace and digit runs, CRLF, contractions in any case, and special-token strings
// (whole and cut) inside text. Code points come from blocks assigned long ago, so that the
// Unicode versions of the engines (PCRE2, utf8proc, Python's) agree on their properties.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "core/fs.h"
#include "core/json.h"
#include "data/chat_template.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "testing.h"

namespace anvil {
namespace {

std::string qwen_dir() { return testing::shared_dir() + "/fixtures/qwen3-tokenizer"; }
std::string llama_dir() { return testing::shared_dir() + "/fixtures/llama3_1-tokenizer"; }

void write_jsonl(const std::string& path, const std::vector<OrderedJson>& rows) {
  std::string text;
  for (const auto& r : rows) text += r.dump() + "\n";
  write_file_atomic(path, text);
}

std::vector<OrderedJson> read_jsonl(const std::string& path) {
  std::vector<OrderedJson> rows;
  const std::string text = read_file(path);
  for (size_t b = 0; b < text.size();) {
    size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    if (e > b) rows.push_back(OrderedJson::parse(text.substr(b, e - b)));
    b = e + 1;
  }
  return rows;
}

// `anvil tokenize [--chat] --tokenizer dir` on rows: one output per row.
std::vector<OrderedJson> anvil_tokenize(const std::string& dir, const std::vector<OrderedJson>& rows, bool chat) {
  const std::string tmp = testing::temp_dir("anvil-tokenize");
  write_jsonl(tmp + "/in.jsonl", rows);
  const auto a = testing::run_command(testing::shell_quote(testing::anvil_binary()) + " tokenize --tokenizer " +
                                      testing::shell_quote(dir) + (chat ? " --chat" : "") + " < " + tmp +
                                      "/in.jsonl > " + tmp + "/out.jsonl");
  EXPECT_EQ(a.exit_code, 0) << a.out;
  std::vector<OrderedJson> out;
  if (a.exit_code == 0) out = read_jsonl(tmp + "/out.jsonl");
  EXPECT_EQ(out.size(), rows.size());
  return out;
}

// tests/oracle/tokenizer_oracle.py on rows: one output per row.
std::vector<OrderedJson> oracle_tokenize(const std::string& dir, const std::vector<OrderedJson>& rows) {
  const std::string tmp = testing::temp_dir("oracle");
  write_jsonl(tmp + "/in.jsonl", rows);
  const auto o = testing::run_oracle("tokenizer_oracle.py", {dir, tmp + "/in.jsonl", tmp + "/out.jsonl"});
  EXPECT_EQ(o.exit_code, 0) << o.out;
  std::vector<OrderedJson> out;
  if (o.exit_code == 0) out = read_jsonl(tmp + "/out.jsonl");
  EXPECT_EQ(out.size(), rows.size());
  return out;
}

struct Outputs {
  std::vector<OrderedJson> anvil, oracle;
};
Outputs run_both(const std::string& dir, const std::vector<OrderedJson>& rows, bool chat) {
  return {anvil_tokenize(dir, rows, chat), oracle_tokenize(dir, rows)};
}

class TextGen {
 public:
  explicit TextGen(uint64_t seed) : rng_(seed) {}

  std::string text() {
    std::string s;
    const int parts = pick(1, 12);
    for (int p = 0; p < parts; ++p) piece(s);
    return s;
  }

 private:
  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  template <class T>
  const T& one(const std::vector<T>& v) { return v[static_cast<size_t>(pick(0, static_cast<int>(v.size()) - 1))]; }
  void cps(std::string& s, char32_t lo, char32_t hi, int n) {
    for (int k = 0; k < n; ++k) utf8_append(s, static_cast<char32_t>(pick(static_cast<int>(lo), static_cast<int>(hi))));
  }

  void piece(std::string& s) {
    static const std::vector<std::string> words = {"hello", "World", "the", "GPU", "naïve", "don't", "THEY'LL", "it'S",
                                                   "we've", "I'm", "x", "fsdp2", "über", "Ωmega", "func_name", "__init__"};
    static const std::vector<std::string> specials = {"<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>",
                                                      "<tool_call>", "<|begin_of_text|>", "<|eot_id|>",
                                                      "<|start_header_id|>", "<|im_", "im_end|>", "<|", "|>"};
    static const std::vector<std::string> spaces = {" ", "  ", "\t", "\n", "\r\n", "\n\n", "   \n", "\xC2\xA0",
                                                    "\xE3\x80\x80", "\xE2\x80\x83", " \t ", "\n \n"};
    static const std::vector<std::string> emoji = {"\xF0\x9F\x98\x80", "\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",
                                                   "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7",
                                                   "\xF0\x9F\x87\xAB\xF0\x9F\x87\xB7", "\xE2\x9D\xA4\xEF\xB8\x8F", "\xF0\x9F\x94\xA5"};
    switch (pick(0, 13)) {
      case 0: s += one(words); break;
      case 1: s += one(specials); break;
      case 2: s += one(spaces); break;
      case 3: s += one(emoji); break;
      case 4: cps(s, '0', '9', pick(1, 9)); break;
      case 5: cps(s, 0x21, 0x7E, pick(1, 6)); break;                 // ASCII punctuation and letters
      case 6: cps(s, 0x0430, 0x044F, pick(1, 8)); break;             // Cyrillic
      case 7: cps(s, 0x4E00, 0x62FF, pick(1, 6)); break;             // CJK
      case 8: cps(s, 0x0627, 0x064A, pick(1, 6)); break;             // Arabic
      case 9: cps(s, 0x0905, 0x0939, pick(1, 5)); cps(s, 0x093E, 0x094C, 1); break;  // Devanagari + sign
      case 10: cps(s, 0x0E01, 0x0E30, pick(1, 6)); break;            // Thai
      case 11: cps(s, 0xAC00, 0xD7A3, pick(1, 4)); break;            // Hangul syllables
      case 12: s += one(words); cps(s, 0x0300, 0x036F, pick(1, 2)); break;  // combining marks
      default: cps(s, 0x0391, 0x03C9, pick(1, 6)); break;            // Greek
    }
  }

  std::mt19937_64 rng_;
};

void check_tokenizer_parity(const std::string& dir) {
  const Tokenizer tok = Tokenizer::load(dir);
  TextGen gen(20261129);
  std::vector<OrderedJson> rows;
  for (int k = 0; k < 3000; ++k) rows.push_back({{"text", gen.text()}});
  const Outputs out = run_both(dir, rows, false);
  if (out.anvil.size() != rows.size() || out.oracle.size() != rows.size()) return;
  int bad = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    const auto want = out.oracle[k]["ids"].get<std::vector<int32_t>>();
    if (out.anvil[k]["ids"] != out.oracle[k]["ids"] && ++bad <= 5)
      ADD_FAILURE() << "ids differ for " << rows[k].dump() << "\n got: " << out.anvil[k]["ids"].dump()
                    << "\nwant: " << out.oracle[k]["ids"].dump();
    if (tok.decode(want) != out.oracle[k]["decoded"].get<std::string>() && ++bad <= 5)
      ADD_FAILURE() << "decode differs for " << rows[k].dump();
  }
  EXPECT_EQ(bad, 0) << "of " << rows.size() << " texts";
  std::printf("%zu texts: ids and decode equal to tokenizers'\n", rows.size());
}

TEST(OracleParity, Qwen3TokenizerIdsAndDecode) {
  ANVIL_REQUIRE_ORACLE();
  check_tokenizer_parity(qwen_dir());
}

TEST(OracleParity, Llama31TokenizerIdsAndDecode) {
  ANVIL_REQUIRE_ORACLE();
  check_tokenizer_parity(llama_dir());
}

// A random chat: system, user, assistant (with or without <think> blocks, reasoning_content,
// tool calls with arguments as an object or a string) and tool turns, any text in each.
OrderedJson random_chat(std::mt19937_64& rng, TextGen& gen) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  OrderedJson messages = OrderedJson::array();
  if (pick(0, 2) == 0) messages.push_back({{"role", "system"}, {"content", gen.text()}});
  const int turns = pick(1, 4);
  for (int t = 0; t < turns; ++t) {
    messages.push_back({{"role", "user"}, {"content", gen.text()}});
    if (t + 1 == turns && pick(0, 1)) break;
    OrderedJson answer = {{"role", "assistant"}, {"content", gen.text()}};
    const int kind = pick(0, 5);
    if (kind == 0) answer["content"] = "<think>\n" + gen.text() + "\n</think>\n\n" + gen.text();
    if (kind == 1) answer["reasoning_content"] = gen.text();
    if (kind == 2) {
      answer["content"] = pick(0, 1) ? "" : gen.text();
      OrderedJson args = {{"query", gen.text()}, {"n", pick(-5, 500)}, {"x", pick(0, 1000) / 8.0},
                          {"flag", pick(0, 1) == 1}, {"list", {gen.text(), nullptr}}};
      OrderedJson call = {{"name", "fn_" + std::to_string(pick(0, 9))},
                          {"arguments", pick(0, 1) ? args : OrderedJson(args.dump())}};
      answer["tool_calls"] = {{{"type", "function"}, {"function", call}}};
      messages.push_back(answer);
      for (int r = pick(1, 2); r > 0; --r) messages.push_back({{"role", "tool"}, {"content", gen.text()}});
      continue;
    }
    messages.push_back(answer);
  }
  return messages;
}

// Renderings and ids through `anvil tokenize --chat`, generation prompts through the library.
void check_template_parity(const std::string& dir) {
  const ChatTemplate tmpl = ChatTemplate::load(dir);
  std::mt19937_64 rng(7);
  TextGen gen(11);
  std::vector<OrderedJson> rows;
  for (int k = 0; k < 1000; ++k) rows.push_back({{"messages", random_chat(rng, gen)}});
  const Outputs out = run_both(dir, rows, true);
  if (out.anvil.size() != rows.size() || out.oracle.size() != rows.size()) return;
  int bad = 0;
  for (size_t k = 0; k < rows.size(); ++k) {
    const OrderedJson& want = out.oracle[k];
    ASSERT_FALSE(want.contains("error")) << rows[k].dump() << ": " << want["error"];
    const std::string prompt = tmpl.render(rows[k]["messages"], true);
    const bool ok = out.anvil[k]["rendered"] == want["rendered"] && out.anvil[k]["ids"] == want["ids"] &&
                    prompt == want["prompt"].get<std::string>();
    if (!ok && ++bad <= 3)
      ADD_FAILURE() << "differs for " << rows[k].dump() << "\n got: " << out.anvil[k].dump()
                    << "\n prompt: " << OrderedJson(prompt).dump() << "\nwant: " << want.dump();
  }
  EXPECT_EQ(bad, 0) << "of " << rows.size() << " chats";
  std::printf("%zu chats: renderings, ids and generation prompts equal to transformers'\n", rows.size());
}

TEST(OracleParity, Qwen3ChatTemplate) {
  ANVIL_REQUIRE_ORACLE();
  check_template_parity(qwen_dir());
}

TEST(OracleParity, Llama31ChatTemplate) {
  ANVIL_REQUIRE_ORACLE();
  check_template_parity(llama_dir());
}


// Jinja edge cases, each template rendered over random chats by `anvil tokenize --chat` (from
// a tokenizer folder holding that template) and by apply_chat_template: str methods with and
// without arguments (strip/lstrip/rstrip with chars, split with maxsplit, replace with count,
// find, count, startswith with a tuple), code-point length and slicing, Unicode case
// mapping, Python number formatting and arithmetic, tojson (with indent), loop variables,
// namespace, filters over lists, tests, whitespace control with trim_blocks/lstrip_blocks,
// string escapes and Python reprs of lists, dicts and None.
const std::vector<std::string> kEdgeTemplates = {
    R"T({%- for m in messages %}[{{ m.content.strip() }}|{{ m.content.strip(' \n\t') }}|{{ m.content.lstrip('<|>') }}|{{ m.content.rstrip('0123456789 ') }}|{{ m.content.strip('hel') }}|{{ m.content | trim }}]
{% endfor %})T",
    R"T({%- for m in messages %}{{ m.content.split('\n') | join('¶') }}|{{ m.content.split(' ', 2) | length }}|{{ m.content.split() | join('_') }}|{{ m.content.replace(' ', '·', 2) }}|{{ m.content | replace('e', 'E') }}|{{ m.content.find('o') }}|{{ m.content.count('e') }}|{{ m.content.startswith('<|') }}{{ m.content.endswith(('>', ' ')) }}
{% endfor %})T",
    R"T({%- for m in messages %}{{ m.content | length }}|{{ m.content[:5] }}|{{ m.content[-3:] }}|{{ m.content[::-1] }}|{{ m.content[1:-1:2] }}|{{ m.content.upper() }}|{{ m.content.lower() }}|{{ m.content.title() }}|{{ m.content.capitalize() }}
{% endfor %})T",
    R"T({%- set ns = namespace(total=0) %}
{%- for m in messages %}
  {%- set ns.total = ns.total + m.content | length %}
  {{ loop.index }}/{{ loop.length }} {{ loop.revindex0 }} {{ loop.first }} {{ loop.last }} {{ loop.previtem.role if loop.previtem is defined else 'none' }} {{ m | tojson }} {{ m.content | tojson(indent=2) }}
{%- endfor %}
{{ ns.total }} {{ ns.total / 3 }} {{ ns.total // 7 }} {{ -ns.total // 7 }} {{ ns.total % 7 }} {{ 2 ** 10 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1 / 3 }} {{ 10 / 2 }} {{ (ns.total * 1.5) | int }} {{ '42' | int + 1 }} {{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | map(attribute='role') | join(',') }} {{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | list }})T",
    R"T({% for m in messages %}
    {% if m.role == 'user' %}
  U: {{ m.content }}
    {% elif m.content is string and m.content %}
  A{{ '+' if m.tool_calls is defined else '' }}: {{ m.content | trim | replace('\n', '\n  ') }}
    {% else %}
  E
    {% endif %}
{% endfor %}
{{ messages[0].content is defined }} {{ messages[0].nothing is defined }} {{ none is none }} {{ messages is iterable }} {{ messages[0] is mapping }} {{ 3 is number }} {{ 'x' ~ 1 ~ none }} {{ messages[0].get('role') }} {{ messages[0].get('missing', 'dflt') }} {{ messages[-1].role | upper }} {{ "a\tb\n" }} {{ 'it\'s' }} {{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': 2} }} {{ none }} {{ true }} {{ 'abc' in messages[0].content }}
{% for k, v in messages[0].items() %}{{ k }}={{ v | string | length }};{% endfor %})T",
};

TEST(OracleParity, JinjaEdgeCases) {
  ANVIL_REQUIRE_ORACLE();
  const OrderedJson config = OrderedJson::parse(read_file(qwen_dir() + "/tokenizer_config.json"));
  std::mt19937_64 rng(99);
  TextGen gen(12);
  std::vector<OrderedJson> chats;
  for (int k = 0; k < 150; ++k) chats.push_back(random_chat(rng, gen));
  // anvil renders from a tokenizer folder holding the template; the oracle (one process for
  // all templates) gets it as apply_chat_template's chat_template argument.
  std::vector<OrderedJson> got, rows;
  for (size_t t = 0; t < kEdgeTemplates.size(); ++t) {
    const std::string dir = testing::temp_dir("jinja");
    std::filesystem::create_symlink(qwen_dir() + "/tokenizer.json", dir + "/tokenizer.json");
    OrderedJson c = config;
    c["chat_template"] = kEdgeTemplates[t];
    write_file_atomic(dir + "/tokenizer_config.json", c.dump());
    std::vector<OrderedJson> these;
    for (const auto& m : chats) these.push_back({{"messages", m}});
    const auto out = anvil_tokenize(dir, these, true);
    if (out.size() != these.size()) return;
    got.insert(got.end(), out.begin(), out.end());
    for (const auto& m : chats) rows.push_back({{"messages", m}, {"chat_template", kEdgeTemplates[t]}});
  }
  const auto want = oracle_tokenize(qwen_dir(), rows);
  if (want.size() != rows.size()) return;
  int bad = 0, compared = 0;
  for (size_t k = 0; k < rows.size(); ++k, ++compared) {
    const size_t t = k / chats.size();
    ASSERT_FALSE(want[k].contains("error")) << "template " << t << ": " << want[k]["error"];
    if ((got[k]["rendered"] != want[k]["rendered"] || got[k]["ids"] != want[k]["ids"]) && ++bad <= 3)
      ADD_FAILURE() << "template " << t << " differs for " << rows[k]["messages"].dump() << "\n got: "
                    << got[k]["rendered"].dump() << "\nwant: " << want[k]["rendered"].dump();
  }
  EXPECT_EQ(bad, 0) << "of " << compared << " renderings";
  std::printf("%d renderings of %zu edge-case templates equal to transformers'\n", compared, kEdgeTemplates.size());
}

}  // namespace
}  // namespace anvil
