// data/tokenizer loading: the simdjson reader of the vocab and merges against an independent
// nlohmann::json read of the same file, the errors a bad file gets, and the load time (printed,
// not asserted: wall clocks differ between machines; the figure is for comparing builds).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "core/json.h"
#include "data/tokenizer.h"
#include "testing.h"

namespace anvil {
namespace {

std::string qwen3_file() { return testing::shared_dir() + "/fixtures/qwen3-tokenizer/tokenizer.json"; }

TEST(TokenizerLoad, EveryVocabEntryAndAddedTokenMatchesTheFile) {
  const Tokenizer tok = Tokenizer::load(qwen3_file());
  const Json j = json_read_file(qwen3_file());
  const Json& vocab = j.at("model").at("vocab");
  ASSERT_GT(vocab.size(), 150000u);
  int32_t max_id = -1;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    const auto id = it.value().get<int32_t>();
    max_id = std::max(max_id, id);
    const auto got = tok.token_to_id(it.key());
    ASSERT_TRUE(got.has_value()) << it.key();
    ASSERT_EQ(*got, id) << it.key();
  }
  for (const Json& a : j.at("added_tokens")) {
    const auto id = a.at("id").get<int32_t>();
    max_id = std::max(max_id, id);
    EXPECT_EQ(tok.token_to_id(a.at("content").get<std::string>()), id);
  }
  EXPECT_EQ(tok.vocab_size(), max_id + 1);
  // Byte-level characters map back to bytes: "Ġ" is the space, "Ċ" the newline.
  EXPECT_EQ(tok.token_bytes(*tok.token_to_id("\xC4\xA0the")), " the");
  EXPECT_EQ(tok.token_bytes(*tok.token_to_id("\xC4\x8A")), "\n");
}

TEST(TokenizerLoad, MergesAsStringsAndAsPairsGiveTheSameTokenizer) {
  // HF writes merges as "a b" (older files) or ["a", "b"] (newer); the ranks are the order.
  const std::string head = R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "abab": 3, "aa": 4},)";
  const std::string tail = R"(}, "pre_tokenizer": {"type": "ByteLevel", "use_regex": false},
                             "decoder": {"type": "ByteLevel"}})";
  const Tokenizer strings = Tokenizer::from_json(head + R"("merges": ["a b", "ab ab", "a a"])" + tail, "s.json");
  const Tokenizer pairs =
      Tokenizer::from_json(head + R"("merges": [["a", "b"], ["ab", "ab"], ["a", "a"]])" + tail, "p.json");
  for (const char* text : {"ababa", "aaa", "babab", "aabb"}) EXPECT_EQ(strings.encode(text), pairs.encode(text)) << text;
  EXPECT_EQ(pairs.encode("ababa"), (std::vector<int32_t>{3, 0}));
}

void expect_error(const std::string& json, ErrorKind kind, const std::vector<std::string>& parts) {
  try {
    Tokenizer::from_json(json, "bad.json");
    ADD_FAILURE() << "no error for " << json;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    for (const std::string& p : parts) EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

TEST(TokenizerLoad, BadFilesNameTheFileAndTheFault) {
  const std::string tail = R"(, "decoder": {"type": "ByteLevel"}})";
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0,}})", ErrorKind::kInvalidInput,
               {"bad.json", "not valid JSON", "line 1"});
  expect_error("[1, 2]", ErrorKind::kInvalidInput, {"bad.json", "not a JSON object"});
  expect_error(R"({"decoder": {"type": "ByteLevel"}})", ErrorKind::kInvalidInput, {"bad.json", "\"model\""});
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": "zero"}, "merges": []})" + tail,
               ErrorKind::kInvalidInput, {"bad.json", "vocab entry 'a'", "not an integer"});
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": -1}, "merges": []})" + tail, ErrorKind::kInvalidInput,
               {"bad.json", "negative id for vocab entry 'a'"});
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}})" + tail, ErrorKind::kInvalidInput,
               {"bad.json", "model.merges"});
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]})" + tail,
               ErrorKind::kInvalidInput, {"bad.json", "merge 0 ('a', 'b')", "missing from the vocab"});
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": ["ab"]})" + tail, ErrorKind::kInvalidInput,
               {"bad.json", "merge 0 'ab' is not 'a b'"});
  expect_error(R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": [["a", 1]]})" + tail,
               ErrorKind::kInvalidInput, {"bad.json", "merge 0 is not a pair of strings"});
}

TEST(TokenizerLoad, MissingFileIsNotFound) {
  try {
    Tokenizer::load(testing::temp_dir("tokenizer_load") + "/none");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kNotFound);
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
}

TEST(TokenizerLoad, PrintsQwen3LoadTime) {
  for (int run = 0; run < 3; ++run) {
    const auto start = std::chrono::steady_clock::now();
    const Tokenizer tok = Tokenizer::load(qwen3_file());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("qwen3 tokenizer.json load %d: %.3f s (vocab %d)\n", run, s, tok.vocab_size());
    EXPECT_EQ(tok.vocab_size(), 151669);
  }
}

}  // namespace
}  // namespace anvil
