// Preference rows (DPO: data/row_shapes.h, RowEncoder): prompt/chosen/rejected as strings and
// as conversations, and the implicit-prompt form, tokenized as TRL's DPOTrainer prepares them
// (tests/oracle/dpo_data_oracle.py runs its _prepare_dataset) with the fixtures' tokenizers
// and chat templates: each pair's ids are the chosen sequence's then the rejected's, and only
// the completions' tokens carry labels. Packed, each pair is two documents of one block, and
// the batch names them (TokenBatch::pairs). Rows of another shape, and pairs longer than a
// block, are refused with what is wrong.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/blocks.h"
#include "data/packing.h"
#include "testing.h"

namespace anvil {
namespace {

std::string tokenizer(const std::string& name) { return testing::shared_dir() + "/fixtures/" + name; }

RowOptions preference_options(const ChatTemplate& t) {
  RowOptions o;
  o.labels = true;
  o.preference = true;
  o.eos_token = t.eos_token();
  return o;
}

constexpr const char* kPlain =
    R"({"prompt": "What is 2 + 3?", "chosen": " 2 + 3 = 5", "rejected": " 6"})" "\n"
    R"({"prompt": "Name a colour:", "chosen": " blue<|im_end|>", "rejected": " loud"})" "\n";
constexpr const char* kConversational =
    R"({"prompt": [{"role": "user", "content": "What is 2 + 3?"}], )"
    R"("chosen": [{"role": "assistant", "content": "2 + 3 = 5"}], "rejected": [{"role": "assistant", "content": "6"}]})" "\n"
    R"({"prompt": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "Hi"}], )"
    R"("chosen": [{"role": "assistant", "content": "Hello"}], "rejected": [{"role": "assistant", "content": "Go away, please."}]})" "\n";
constexpr const char* kImplicitPlain =
    R"({"chosen": "The sky is blue today.", "rejected": "The sky is green today."})" "\n"
    R"({"chosen": "Paris is in France", "rejected": "Paris is in Spain, I think"})" "\n";
constexpr const char* kImplicitConversational =
    R"({"chosen": [{"role": "user", "content": "What colour is the sky?"}, {"role": "assistant", "content": "Blue."}], )"
    R"("rejected": [{"role": "user", "content": "What colour is the sky?"}, {"role": "assistant", "content": "Green."}]})" "\n"
    R"({"chosen": [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"}, )"
    R"({"role": "assistant", "content": "Hello!"}], "rejected": [{"role": "system", "content": "Be kind."}, )"
    R"({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "What?"}]})" "\n";

std::vector<Json> read_jsonl(const std::string& path) {
  std::vector<Json> rows;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) rows.push_back(Json::parse(line));
  return rows;
}

std::vector<int32_t> ids_of(const Json& j) { return j.get<std::vector<int32_t>>(); }

// The ids and labels TRL's collator makes of one prepared pair, in anvil's layout.
TokenizedRow trl_pair(const Json& want) {
  const auto p = ids_of(want["prompt_ids"]), c = ids_of(want["chosen_ids"]), r = ids_of(want["rejected_ids"]);
  TokenizedRow row;
  for (const auto* completion : {&c, &r}) {
    row.ids.insert(row.ids.end(), p.begin(), p.end());
    row.ids.insert(row.ids.end(), completion->begin(), completion->end());
    row.labels.insert(row.labels.end(), p.size(), kIgnoreIndex);
    row.labels.insert(row.labels.end(), completion->begin(), completion->end());
    if (completion == &c) row.pair_split = static_cast<int64_t>(row.ids.size());
  }
  return row;
}

class DpoData : public ::testing::TestWithParam<std::string> {};

// Plain-text rows with Llama 3.1's tokenizer are left out: TRL tokenizes them with the
// tokenizer's post-processor (its BOS), which anvil's tokenizer does not apply (nor does its
// prompt-completion path); chats render their BOS in the template and are compared.
TEST_P(DpoData, PairsAreTrls) {
  ANVIL_REQUIRE_ORACLE();
  const std::string dir = testing::temp_dir("dpo_data"), tok_dir = tokenizer(GetParam());
  const Tokenizer tok = Tokenizer::load(tok_dir);
  const ChatTemplate tmpl = ChatTemplate::load(tok_dir);
  const RowEncoder enc(tok, &tmpl, preference_options(tmpl));
  int pairs = 0;
  const bool plain = GetParam() != "llama3_1-tokenizer";
  for (const char* rows : {kPlain, kConversational, kImplicitPlain, kImplicitConversational}) {
    if (!plain && (rows == kPlain || rows == kImplicitPlain)) continue;
    const std::string file = dir + "/rows.jsonl", out = dir + "/trl.jsonl";
    std::ofstream(file) << rows;
    const auto o = testing::run_oracle("dpo_data_oracle.py", {tok_dir, file, out});
    ASSERT_EQ(o.exit_code, 0) << o.out;
    const std::vector<Json> want = read_jsonl(out);
    std::ifstream in(file);
    std::string line;
    for (size_t i = 0; std::getline(in, line); ++i, ++pairs) {
      ASSERT_LT(i, want.size());
      TokenizedRow got;
      enc.encode_line(line, got);
      const TokenizedRow trl = trl_pair(want[i]);
      EXPECT_EQ(got.ids, trl.ids) << line;
      EXPECT_EQ(got.labels, trl.labels) << line;
      EXPECT_EQ(got.pair_split, trl.pair_split) << line;
    }
  }
  std::printf("%s: %d pairs, ids and labels equal to TRL's\n", GetParam().c_str(), pairs);
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, DpoData, ::testing::Values("qwen3-tokenizer", "llama3_1-tokenizer"));

std::string error_of(const RowEncoder& enc, const std::string& line) {
  try {
    TokenizedRow row;
    enc.encode_line(line, row);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(DpoDataShapes, OtherShapesAreRefused) {
  const std::string tok_dir = tokenizer("qwen3-tokenizer");
  const Tokenizer tok = Tokenizer::load(tok_dir);
  const ChatTemplate tmpl = ChatTemplate::load(tok_dir);
  const RowEncoder dpo(tok, &tmpl, preference_options(tmpl));
  EXPECT_NE(error_of(dpo, R"({"prompt": "a", "completion": "b"})").find("--objective dpo trains on preference rows"),
            std::string::npos);
  EXPECT_NE(error_of(dpo, R"({"chosen": "a"})").find("needs both \"chosen\" and \"rejected\""), std::string::npos);
  EXPECT_NE(error_of(dpo, R"({"prompt": "a", "chosen": "b", "rejected": [{"role": "user", "content": "c"}]})")
                .find("must all be strings or all be lists of messages"),
            std::string::npos);
  const RowEncoder sft(tok, &tmpl, RowOptions{});
  EXPECT_NE(error_of(sft, R"({"prompt": "a", "chosen": "b", "rejected": "c"})").find("trains with --objective dpo"),
            std::string::npos);
}

// Prepared and read back: every pair two documents of one block, named by the batch with
// its index among the data's pairs; a pair longer than a block is refused naming the row.
TEST(DpoDataShapes, PairsPackAsTwoDocumentsOfOneBlock) {
  const std::string dir = testing::temp_dir("dpo_pack"), tok_dir = tokenizer("qwen3-tokenizer");
  std::string rows;
  for (int k = 0; k < 12; ++k)
    rows += cat(R"({"prompt": "Question )", k, R"(: what is )", k, " + ", k * 7,
                R"(?", "chosen": " )", 8 * k, R"(", "rejected": " )", std::string(static_cast<size_t>(k % 5 + 1), 'x'),
                "\"}\n");
  std::ofstream(dir + "/pairs.jsonl") << rows;
  DataSection d;
  d.source = dir + "/pairs.jsonl";
  d.tokenizer = tok_dir;
  d.cache = dir + "/cache";
  d.seq_len = 64;
  d.objective = Objective::kDpo;
  const BlockSource blocks(d, d.source, "", tok_dir, PrepareTurn{});
  EXPECT_EQ(blocks.pairs(), 12);
  const Tokenizer tok = Tokenizer::load(tok_dir);
  const ChatTemplate tmpl = ChatTemplate::load(tok_dir);
  const RowEncoder enc(tok, &tmpl, preference_options(tmpl));
  std::vector<TokenizedRow> want(12);
  std::istringstream lines(rows);
  std::string line;
  for (auto& w : want) std::getline(lines, line), enc.encode_line(line, w);
  std::vector<int> seen(12, 0);
  for (int64_t b = 0; b < blocks.size(); ++b) {
    TokenBatch batch;
    blocks.append(b, batch);
    for (const PreferencePair& p : batch.pairs) {
      ASSERT_LT(p.index, 12);  // the pair's index in the file's packed order
      ++seen[static_cast<size_t>(p.index)];
      ASSERT_EQ(p.rejected_begin, p.chosen_begin + p.chosen_length);
      const auto from = batch.ids.begin() + static_cast<std::ptrdiff_t>(p.chosen_begin);
      const std::vector<int64_t> ids(from, from + static_cast<std::ptrdiff_t>(p.chosen_length + p.rejected_length));
      const auto w = std::find_if(want.begin(), want.end(), [&](const TokenizedRow& r) {
        return std::equal(ids.begin(), ids.end(), r.ids.begin(), r.ids.end());
      });
      ASSERT_NE(w, want.end()) << "pair " << p.index << " is no row's pair";
      EXPECT_EQ(p.chosen_length, w->pair_split);
      for (int64_t k = 0; k < p.chosen_length + p.rejected_length; ++k) {
        const auto i = static_cast<size_t>(p.chosen_begin + k);
        EXPECT_EQ(batch.labels[i], w->labels[static_cast<size_t>(k)]);
        EXPECT_EQ(batch.positions[i], k < p.chosen_length ? k : k - p.chosen_length);  // two documents
      }
    }
  }
  for (int k = 0; k < 12; ++k) EXPECT_EQ(seen[static_cast<size_t>(k)], 1) << "pair " << k;

  d.seq_len = 16;
  try {
    const BlockSource tight(d, d.source, "", tok_dir, PrepareTurn{});
    ADD_FAILURE() << "a pair longer than --seq-len was packed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than --seq-len 16"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("pairs.jsonl"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anvil
