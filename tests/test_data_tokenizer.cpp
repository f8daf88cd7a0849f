// data/tokenizer: exact ids and decoded text against the Hugging Face golden fixtures
// (texts_golden.json: AutoTokenizer(Qwen3), add_special_tokens=False), plus the refusals.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/json.h"
#include "data/tokenizer.h"
#include "data/utf8.h"
#include "testing.h"

namespace anvil {
namespace {

const Tokenizer& qwen3() {
  static const Tokenizer tok = Tokenizer::load(testing::shared_dir() + "/fixtures/qwen3-tokenizer");
  return tok;
}

TEST(Tokenizer, MatchesGoldenIdsAndDecode) {
  const Json golden = json_read_file(testing::shared_dir() + "/fixtures/tokenizer/texts_golden.json");
  ASSERT_GT(golden.at("texts").size(), 10u);
  for (const Json& t : golden.at("texts")) {
    const std::string text = t.at("text").get<std::string>();
    const auto want = t.at("ids").get<std::vector<int32_t>>();
    const std::vector<int32_t> got = qwen3().encode(text);
    EXPECT_EQ(got, want) << "text: " << Json(text).dump();
    EXPECT_EQ(qwen3().decode(want), t.at("decoded").get<std::string>()) << "text: " << Json(text).dump();
  }
}

TEST(Tokenizer, SpecialTokensInsideTextAndSkipOnDecode) {
  const auto ids = qwen3().encode("a<|im_start|>b<think>");
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[1], *qwen3().token_to_id("<|im_start|>"));
  EXPECT_EQ(ids[3], *qwen3().token_to_id("<think>"));
  // <|im_start|> is special (skipped), <think> is an added token that is not special (kept).
  EXPECT_EQ(qwen3().decode(ids, /*skip_special_tokens=*/true), "ab<think>");
}

TEST(Tokenizer, NfcAppliesBetweenAddedTokensOnly) {
  // "e" + U+0301 composes to U+00E9 under NFC: the same ids as the precomposed text.
  EXPECT_EQ(qwen3().encode("caf\x65\xCC\x81"), qwen3().encode("caf\xC3\xA9"));
  // An added token between them keeps the mark uncomposed, as the reference does.
  const auto split = qwen3().encode("e<|im_end|>\xCC\x81");
  ASSERT_GE(split.size(), 3u);
  EXPECT_EQ(split[1], *qwen3().token_to_id("<|im_end|>"));
}

TEST(Tokenizer, LongWhitespaceRunAndEmpty) {
  EXPECT_TRUE(qwen3().encode("").empty());
  const std::string spaces(5000, ' ');
  const auto ids = qwen3().encode(spaces);
  EXPECT_EQ(qwen3().decode(ids), spaces);
}

TEST(Tokenizer, DecodeRepairsInvalidUtf8LikeRust) {
  EXPECT_EQ(utf8_lossy("a\xF0\x9F\x98"), "a\xEF\xBF\xBD");        // truncated 4-byte: one U+FFFD
  EXPECT_EQ(utf8_lossy("\xC0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD");  // overlong: two
  EXPECT_EQ(utf8_lossy("\xED\xA0\x80"), "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // surrogate
}

TEST(Tokenizer, RejectsInvalidUtf8Input) {
  try {
    qwen3().encode("ok\xFF");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_NE(std::string(e.what()).find("byte 2"), std::string::npos) << e.what();
  }
}

TEST(Tokenizer, RefusesUnsupportedModels) {
  for (const char* type : {"WordPiece", "Unigram"}) {
    const std::string json = std::string(R"({"model": {"type": ")") + type + R"(", "vocab": {}}})";
    try {
      Tokenizer::from_json(json, "t.json");
      FAIL() << type;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kUnsupported);
      EXPECT_NE(std::string(e.what()).find(type), std::string::npos) << e.what();
    }
  }
}

TEST(Tokenizer, TinyBpeMergesByRankLeftmostFirst) {
  // Merges: "a b" (rank 0), "ab ab" (rank 1). "ababa" -> [ab, ab, a] -> [abab, a].
  const std::string json = R"({
    "model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "ab": 2, "abab": 3, "aa": 4},
              "merges": ["a b", "ab ab", "a a"]},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "use_regex": false},
    "decoder": {"type": "ByteLevel"}})";
  const Tokenizer tok = Tokenizer::from_json(json, "tiny.json");
  EXPECT_EQ(tok.encode("ababa"), (std::vector<int32_t>{3, 0}));
  EXPECT_EQ(tok.encode("aaa"), (std::vector<int32_t>{4, 0}));  // leftmost pair first
  EXPECT_EQ(tok.decode({3, 0}), "ababa");
}

}  // namespace
}  // namespace anvil
