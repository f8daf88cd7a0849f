// The row shapes users bring (data/row_shapes.h), with the demo's tokenizer and template:
//  - ShareGPT conversations ({"from": "human"|"gpt", "value"}) and a chat column renamed
//    with --columns encode as the same chat with {"role", "content"} messages;
//  - prompt-completion rows, plain and conversational: ids and labels (-100 on the prompt)
//    equal to those TRL's SFTTrainer prepares for the same tokenizer and template
//    (tests/oracle/trl_sft_oracle.py), through anvil prepare's blocks too;
//    --no-completion-only-loss keeps no labels;
//  - ShareGPT and plain prompt-completion data sets in Parquet pack as the same rows in JSONL;
//  - a row of no known shape names the shapes expected.
#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/packing.h"
#include "testing.h"

namespace anvil {
namespace {

std::string demo() { return std::string(ANVIL_SOURCE_DIR) + "/data/demo"; }

TokenizedRow encode(const RowEncoder& enc, const std::string& line) {
  TokenizedRow row;
  enc.encode_line(line, row);
  return row;
}

std::string error_of(const RowEncoder& enc, const std::string& line) {
  try {
    encode(enc, line);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

RowOptions options(bool assistant_only, const std::string& columns = "") {
  RowOptions o;
  o.assistant_only_loss = assistant_only;
  o.labels = true;
  o.eos_token = "<|im_end|>";
  o.columns = ColumnMap::parse(columns);
  return o;
}

TEST(RowShapes, ShareGptAndRenamedColumnsAreTheSameChat) {
  const Tokenizer tok = Tokenizer::load(demo());
  const ChatTemplate tmpl = ChatTemplate::load(demo());
  const RowEncoder enc(tok, &tmpl, options(true));
  const TokenizedRow chat = encode(enc, R"({"messages": [{"role": "system", "content": "Be terse."},
      {"role": "user", "content": "What is 2 + 3?"}, {"role": "assistant", "content": "2 + 3 = 5"}]})");
  const TokenizedRow share = encode(enc, R"({"conversations": [{"from": "system", "value": "Be terse."},
      {"from": "human", "value": "What is 2 + 3?"}, {"from": "gpt", "value": "2 + 3 = 5"}]})");
  EXPECT_EQ(share.ids, chat.ids);
  EXPECT_EQ(share.labels, chat.labels);
  EXPECT_EQ(share.rendered, chat.rendered);
  const RowEncoder renamed(tok, &tmpl, options(true, "messages=dialog"));
  const TokenizedRow dialog = encode(renamed, R"({"id": 7, "dialog": [{"from": "system", "value": "Be terse."},
      {"from": "human", "value": "What is 2 + 3?"}, {"from": "gpt", "value": "2 + 3 = 5"}]})");
  EXPECT_EQ(dialog.ids, chat.ids);
  EXPECT_EQ(dialog.labels, chat.labels);

  const std::string unknown = error_of(enc, R"({"question": "2 + 3?", "answer": "5"})");
  for (const char* part : {"a row must hold one of", "\"messages\"", "\"conversations\"", "\"text\"", "\"prompt\"",
                           "--columns", "this one has question, answer"})
    EXPECT_NE(unknown.find(part), std::string::npos) << part << " in: " << unknown;
  EXPECT_NE(error_of(enc, R"({"conversations": [{"from": "wizard", "value": "hi"}]})")
                .find("message 0 has the unknown role \"wizard\""),
            std::string::npos);
  EXPECT_NE(error_of(enc, R"({"prompt": "hi"})").find("needs both \"prompt\" and \"completion\""), std::string::npos);
  EXPECT_NE(error_of(enc, R"({"prompt": "hi", "completion": [{"role": "assistant", "content": "x"}]})")
                .find("must both be strings or both be lists of messages"),
            std::string::npos);
  EXPECT_THROW(ColumnMap::parse("answer=out"), Error);
  EXPECT_THROW(ColumnMap::parse("messages"), Error);
}

std::vector<Json> read_jsonl(const std::string& path) {
  std::vector<Json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) rows.push_back(Json::parse(line));
  return rows;
}

// TRL's ids and labels of the rows of `file` (one data set: rows of one shape).
std::vector<Json> trl_rows(const std::string& file, const std::string& out) {
  const auto o = testing::run_oracle(
      "trl_sft_oracle.py", {testing::fixture_dir("tiny-qwen3"), demo(), file, out});
  EXPECT_EQ(o.exit_code, 0) << o.out;
  return o.exit_code == 0 ? read_jsonl(out) : std::vector<Json>();
}

class WithOracles : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!testing::oracle_missing().empty()) {
      if (testing::in_ci()) FAIL() << testing::oracle_missing();
      GTEST_SKIP() << testing::oracle_missing();
    }
    dir_ = testing::temp_dir("shapes");
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ + "/" + name) << text;
    return dir_ + "/" + name;
  }
  std::string dir_;
};

constexpr const char* kPlain =
    R"({"prompt": "What is 2 + 3?", "completion": " 2 + 3 = 5"})" "\n"
    R"({"prompt": "Name a colour:", "completion": " blue<|im_end|>"})" "\n"
    R"({"prompt": "1, 2, 3,", "completion": "4, 5"})" "\n";
constexpr const char* kConversational =
    R"({"prompt": [{"role": "user", "content": "What is 2 + 3?"}], )"
    R"("completion": [{"role": "assistant", "content": "2 + 3 = 5"}]})" "\n"
    R"({"prompt": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}], )"
    R"("completion": [{"role": "assistant", "content": "Hello"}]})" "\n";

TEST_F(WithOracles, PromptCompletionIdsAndLabelsAreTrls) {
  const Tokenizer tok = Tokenizer::load(demo());
  const ChatTemplate tmpl = ChatTemplate::load(demo());
  const RowEncoder enc(tok, &tmpl, options(false));
  for (const char* rows : {kPlain, kConversational}) {
    const std::string file = write("rows.jsonl", rows);
    const std::vector<Json> want = trl_rows(file, dir_ + "/trl.jsonl");
    std::ifstream in(file);
    std::string line;
    for (size_t i = 0; std::getline(in, line); ++i) {
      ASSERT_LT(i, want.size());
      const TokenizedRow got = encode(enc, line);
      EXPECT_EQ(Json(got.ids), want[i]["input_ids"]) << line;
      EXPECT_EQ(Json(got.labels), want[i]["labels"]) << line;
    }
  }
}

// anvil prepare keeps the completion's labels (as TRL's) in the (wrapped: concatenated) blocks;
// with --no-completion-only-loss it keeps none.
TEST_F(WithOracles, PreparedBlocksHoldTrlsLabels) {
  const std::string file = write("plain.jsonl", kPlain);
  const std::vector<Json> want = trl_rows(file, dir_ + "/trl.jsonl");
  std::vector<int32_t> ids, labels;
  for (const Json& r : want) {
    for (const Json& v : r["input_ids"]) ids.push_back(v.get<int32_t>());
    for (const Json& v : r["labels"]) labels.push_back(v.get<int32_t>());
  }
  const int64_t seq = static_cast<int64_t>(ids.size()) - 3;
  auto r = testing::run_anvil({"prepare", "--tokenizer", demo(), "--data", file, "--seq-len", std::to_string(seq),
                               "--packing", "wrapped", "--out", dir_ + "/packed"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const PackedDataset d = PackedDataset::open(dir_ + "/packed");
  ASSERT_TRUE(d.has_labels());
  ASSERT_EQ(d.num_blocks(), 1);
  EXPECT_EQ(std::vector<int32_t>(d.input_ids(0), d.input_ids(0) + seq),
            std::vector<int32_t>(ids.begin(), ids.end() - 3));
  EXPECT_EQ(std::vector<int32_t>(d.labels(0), d.labels(0) + seq),
            std::vector<int32_t>(labels.begin(), labels.end() - 3));
  r = testing::run_anvil({"prepare", "--tokenizer", demo(), "--data", file, "--seq-len", std::to_string(seq),
                          "--packing", "wrapped", "--no-completion-only-loss", "--out", dir_ + "/whole"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const PackedDataset whole = PackedDataset::open(dir_ + "/whole");
  EXPECT_FALSE(whole.has_labels());
  EXPECT_EQ(std::vector<int32_t>(whole.input_ids(0), whole.input_ids(0) + seq),
            std::vector<int32_t>(ids.begin(), ids.end() - 3));
  // A chat first decides that no labels are kept: a later prompt-completion row is refused.
  const std::string mixed = write("mixed.jsonl", std::string(R"({"text": "hello there"})") + "\n" + kPlain);
  r = testing::run_anvil({"prepare", "--tokenizer", demo(), "--data", mixed, "--seq-len", "8", "--out", dir_ + "/m"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("mixed.jsonl:2: bad row: a prompt-completion row after rows of another shape"),
            std::string::npos) << r.out;
}

// Rows in Parquet (pyarrow writes them from JSONL) pack as in JSONL.
void expect_same_blocks(const std::string& a_dir, const std::string& b_dir) {
  const PackedDataset a = PackedDataset::open(a_dir), b = PackedDataset::open(b_dir);
  ASSERT_EQ(a.num_blocks(), b.num_blocks());
  ASSERT_EQ(a.has_labels(), b.has_labels());
  const int64_t t = a.seq_len();
  for (int64_t k = 0; k < a.num_blocks(); ++k) {
    EXPECT_EQ(std::vector<int32_t>(a.input_ids(k), a.input_ids(k) + t),
              std::vector<int32_t>(b.input_ids(k), b.input_ids(k) + t));
    EXPECT_EQ(std::vector<int32_t>(a.labels(k), a.labels(k) + t), std::vector<int32_t>(b.labels(k), b.labels(k) + t));
  }
}

std::string to_parquet(const std::string& jsonl, const std::string& parquet) {
  const auto w = testing::run_command(
      testing::shell_quote(testing::oracle_python()) +
      " -c 'import sys, pyarrow.json as j, pyarrow.parquet as p; "
      "p.write_table(j.read_json(sys.argv[1]), sys.argv[2])' " +
      testing::shell_quote(jsonl) + " " + testing::shell_quote(parquet));
  EXPECT_EQ(w.exit_code, 0) << w.out;
  return parquet;
}

// Plain prompt-completion rows in Parquet: TRL's ids and completion labels, as from JSONL.
TEST_F(WithOracles, PromptCompletionParquetPacksAsJsonl) {
  const std::string jsonl = write("plain.jsonl", kPlain);
  const std::string parquet = to_parquet(jsonl, dir_ + "/plain.parquet");
  for (const auto& [data, out] : {std::pair{jsonl, dir_ + "/a"}, std::pair{parquet, dir_ + "/b"}}) {
    const auto r = testing::run_anvil({"prepare", "--tokenizer", demo(), "--data", data, "--seq-len", "16",
                                       "--out", out});
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  EXPECT_TRUE(PackedDataset::open(dir_ + "/b").has_labels());
  expect_same_blocks(dir_ + "/a", dir_ + "/b");
}

// A ShareGPT data set in Parquet: the same blocks and assistant-only labels as the chats in
// JSONL.
TEST_F(WithOracles, ShareGptParquetPacksAsTheChats) {
  std::string chats, share;
  for (const char* q : {"2 + 3", "7 - 4", "9 + 9"}) {
    chats += std::string(R"({"messages": [{"role": "user", "content": "What is )") + q +
             R"(?"}, {"role": "assistant", "content": ")" + q + R"("}]})" + "\n";
    share += std::string(R"({"conversations": [{"from": "human", "value": "What is )") + q +
             R"(?"}, {"from": "gpt", "value": ")" + q + R"("}]})" + "\n";
  }
  const std::string jsonl = write("chats.jsonl", chats);
  const std::string parquet = to_parquet(write("share.jsonl", share), dir_ + "/share.parquet");
  for (const auto& [data, out] : {std::pair{jsonl, dir_ + "/c"}, std::pair{parquet, dir_ + "/d"}}) {
    const auto r = testing::run_anvil({"prepare", "--tokenizer", demo(), "--data", data, "--seq-len", "16",
                                       "--assistant-only-loss", "--out", out});
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  expect_same_blocks(dir_ + "/c", dir_ + "/d");
}

}  // namespace
}  // namespace anvil
