// Preference rows (DPO: data/row_shapes.h, RowEncoder): prompt/chosen/rejected as strings and
// as conversations, and the implicit-prompt form, tokenized as TRL's DPOTrainer prepares them
// (tests/oracle/dpo_data_oracle.py runs its _prepare_dataset) with the fixtures' tokenizers
// and chat templates: each pair's ids are the chosen sequence's then the rejected's, and only
// the completions' tokens carry labels. Packed, each pair is two documents of one block, and
// the batch names them (TokenBatch::pairs). Rows of another shape, and pairs longer than a
// block, are refused with what is wrong. Parquet rows (strings, or lists of messages) are read as
// the JSONL rows are. With --max-length N (TRL's max_length, keep_start) each
// sequence keeps its first N tokens and a pair whose prompt alone holds N is dropped, as TRL's
// _prepare_dataset and collator do.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/blocks.h"
#include "data/packing.h"
#include "data/source.h"
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

// Rows of each kind at max_length 24: cut (a long completion), dropped (a long prompt), whole;
// the implicit prompt too.
constexpr const char* kLongPlain =
    R"({"prompt": "Name a colour:", "chosen": " blue, the colour of the sky on a clear and windless summer day", )"
    R"("rejected": " loud"})" "\n"
    R"({"prompt": "Describe, in one careful sentence that names every step you take along the way and why you )"
    R"(take it, how to boil an )"
    R"(egg:", "chosen": " Boil it.", "rejected": " Fry it."})" "\n"
    R"({"prompt": "2 + 2 =", "chosen": " 4", "rejected": " 5"})" "\n";
constexpr const char* kLongConversational =
    R"({"prompt": [{"role": "user", "content": "What is 2 + 3?"}], "chosen": [{"role": "assistant", "content": )"
    R"("2 + 3 = 5, because two and three make five when they are added together."}], )"
    R"("rejected": [{"role": "assistant", "content": "6"}]})" "\n"
    R"({"prompt": [{"role": "system", "content": "You are a careful assistant who always answers in full sentences."}, )"
    R"({"role": "user", "content": "Hi"}], "chosen": [{"role": "assistant", "content": "Hello"}], )"
    R"("rejected": [{"role": "assistant", "content": "Go away."}]})" "\n";
constexpr const char* kLongImplicit =  // a data set of its own: TRL reads a prompt column in every row or none
    R"({"chosen": [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "Blue."}], )"
    R"("rejected": [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "Green, or sometimes a )"
    R"(deep and stormy grey when the weather turns."}]})" "\n";

TEST_P(DpoData, MaxLengthCutsAndDropsAsTrl) {
  ANVIL_REQUIRE_ORACLE();
  const std::string dir = testing::temp_dir("dpo_max_length"), tok_dir = tokenizer(GetParam());
  const Tokenizer tok = Tokenizer::load(tok_dir);
  const ChatTemplate tmpl = ChatTemplate::load(tok_dir);
  RowOptions o = preference_options(tmpl);
  o.max_length = 24;
  const RowEncoder enc(tok, &tmpl, o);
  int cut = 0, dropped = 0, whole = 0;
  for (const char* rows : {kLongPlain, kLongConversational, kLongImplicit}) {
    if (GetParam() == "llama3_1-tokenizer" && rows == kLongPlain) continue;  // as PairsAreTrls
    const std::string file = dir + "/rows.jsonl", out = dir + "/trl.jsonl";
    std::ofstream(file) << rows;
    const auto r = testing::run_oracle("dpo_data_oracle.py", {tok_dir, file, out, "24"});
    ASSERT_EQ(r.exit_code, 0) << r.out;
    std::map<int64_t, Json> kept;  // TRL's rows by their index in the file
    for (const Json& j : read_jsonl(out)) kept[j["row"].get<int64_t>()] = j;
    std::ifstream in(file);
    std::string line;
    for (int64_t i = 0; std::getline(in, line); ++i) {
      TokenizedRow got;
      enc.encode_line(line, got);
      if (!kept.count(i)) {
        EXPECT_TRUE(got.dropped) << "TRL drops this row: " << line;
        ++dropped;
        continue;
      }
      ASSERT_FALSE(got.dropped) << "TRL keeps this row: " << line;
      TokenizedRow want;
      for (const char* name : {"chosen", "rejected"}) {
        const auto ids = ids_of(kept[i][name]), mask = ids_of(kept[i][std::string(name) + "_mask"]);
        for (size_t k = 0; k < ids.size(); ++k) {
          want.ids.push_back(ids[k]);
          want.labels.push_back(mask[k] ? ids[k] : kIgnoreIndex);
        }
        if (want.pair_split == 0) want.pair_split = static_cast<int64_t>(want.ids.size());
        (ids.size() == 24 ? cut : whole) += 1;
      }
      EXPECT_EQ(got.ids, want.ids) << line;
      EXPECT_EQ(got.labels, want.labels) << line;
      EXPECT_EQ(got.pair_split, want.pair_split) << line;
    }
  }
  EXPECT_GT(cut, 0);
  EXPECT_GT(dropped, 0);
  EXPECT_GT(whole, 0);
  std::printf("%s, max_length 24: %d sequences cut, %d whole, %d pairs dropped, as TRL\n", GetParam().c_str(), cut,
              whole, dropped);
}

// The same rows as Parquet (pyarrow: strings, or lists of {role, content} structs) are read as the
// JSONL rows are: every pair's ids, labels and split equal, every form and the long rows; and
// columns of other names with --columns.
TEST_P(DpoData, ParquetRowsAreJsonlRows) {
  ANVIL_REQUIRE_ORACLE();
  const std::string dir = testing::temp_dir("dpo_parquet"), tok_dir = tokenizer(GetParam());
  const Tokenizer tok = Tokenizer::load(tok_dir);
  const ChatTemplate tmpl = ChatTemplate::load(tok_dir);
  const RowEncoder enc(tok, &tmpl, preference_options(tmpl));
  int pairs = 0;
  for (const char* rows : {kPlain, kConversational, kImplicitPlain, kImplicitConversational, kLongPlain,
                           kLongConversational, kLongImplicit}) {
    const std::string jsonl = dir + "/rows.jsonl", parquet = dir + "/rows.parquet";
    std::ofstream(jsonl) << rows;
    const auto r = testing::run_oracle("jsonl_parquet.py", {jsonl, parquet});
    ASSERT_EQ(r.exit_code, 0) << r.out;
    const std::unique_ptr<RowBatch> batch = RowReader::open(parquet)->next(100, 1 << 20);
    ASSERT_NE(batch, nullptr);
    std::ifstream in(jsonl);
    std::string line;
    size_t i = 0;
    for (; std::getline(in, line); ++i, ++pairs) {
      ASSERT_LT(i, batch->size());
      TokenizedRow want, got;
      enc.encode_line(line, want);
      enc.encode_row(batch->row(i), got);
      EXPECT_EQ(got.ids, want.ids) << batch->where(i);
      EXPECT_EQ(got.labels, want.labels) << batch->where(i);
      EXPECT_EQ(got.pair_split, want.pair_split) << batch->where(i);
    }
    EXPECT_EQ(i, batch->size());
  }
  std::printf("%s: %d pairs read from Parquet as from JSONL\n", GetParam().c_str(), pairs);

  // Columns of other names, read with --columns: the same pairs.
  std::string renamed = kConversational;
  for (const auto& [from, to] : {std::pair{"\"prompt\":", "\"question\":"}, std::pair{"\"chosen\":", "\"good\":"},
                                 std::pair{"\"rejected\":", "\"bad\":"}})
    for (size_t at; (at = renamed.find(from)) != std::string::npos;) renamed.replace(at, std::strlen(from), to);
  const std::string jsonl = dir + "/renamed.jsonl", parquet = dir + "/renamed.parquet";
  std::ofstream(jsonl) << renamed;
  ASSERT_EQ(testing::run_oracle("jsonl_parquet.py", {jsonl, parquet}).exit_code, 0);
  RowOptions o = preference_options(tmpl);
  o.columns = ColumnMap::parse("prompt=question,chosen=good,rejected=bad");
  const RowEncoder renamed_enc(tok, &tmpl, o);
  const std::unique_ptr<RowBatch> batch = RowReader::open(parquet, o.columns)->next(100, 1 << 20);
  ASSERT_NE(batch, nullptr);
  std::istringstream want_rows(kConversational);
  std::string line;
  for (size_t i = 0; std::getline(want_rows, line); ++i) {
    ASSERT_LT(i, batch->size());
    TokenizedRow want, got;
    enc.encode_line(line, want);
    renamed_enc.encode_row(batch->row(i), got);
    EXPECT_EQ(got.ids, want.ids) << batch->where(i);
    EXPECT_EQ(got.labels, want.labels) << batch->where(i);
  }
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
    EXPECT_NE(std::string(e.what()).find("--max-length"), std::string::npos) << e.what();
  }
}

// Pairs longer than a block train once --max-length cuts them: 10 pairs of a short prompt and
// long completions, 2 of a prompt longer than the cut. Without it the first is refused; with
// --max-length 32 at --seq-len 64 the 10 pack (each sequence at most 32 tokens) and the 2 are
// dropped, the header and summary say so; at --max-length 2 every pair is dropped, and the error
// says why. --max-length without --objective dpo is refused.
TEST(DpoDataShapes, MaxLengthPacksLongPairs) {
  const std::string dir = testing::temp_dir("dpo_cut");
  std::string rows;
  const std::string words = " and then it went on and on, far longer than a block holds, word after word after word";
  for (int k = 0; k < 12; ++k)
    rows += cat(R"({"prompt": ")", k < 10 ? cat("Q", k, "?") : cat("A long question", words, words, "?"),
                R"(", "chosen": ")", words, R"(", "rejected": ")", words, words, "\"}\n");
  std::ofstream(dir + "/pairs.jsonl") << rows;
  PrepareOptions o;
  o.tokenizer = tokenizer("qwen3-tokenizer");
  o.data = {dir + "/pairs.jsonl"};
  o.seq_len = 64;
  o.preference = true;
  try {
    prepare_packed(o, dir + "/whole");
    ADD_FAILURE() << "a pair longer than --seq-len was packed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than --seq-len 64"), std::string::npos) << e.what();
  }
  o.max_length = 32;
  const Json h = prepare_packed(o, dir + "/cut");
  EXPECT_EQ(h["rows"], 10);
  EXPECT_EQ(h["documents"], 20);
  EXPECT_EQ(h["dropped_pairs"], 2);
  EXPECT_EQ(h["max_length"], 32);
  EXPECT_NE(packing_summary(h).find("2 pairs dropped"), std::string::npos) << packing_summary(h);
  const PackedDataset packed = PackedDataset::open(dir + "/cut/packed.bin");
  for (int64_t b = 0; b < packed.num_blocks(); ++b)
    for (int64_t len : packed.documents(b)) EXPECT_LE(len, 32) << "block " << b;
  o.max_length = 2;
  try {
    prepare_packed(o, dir + "/none");
    ADD_FAILURE() << "data of dropped pairs alone was packed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("(12) is dropped: its prompt alone holds --max-length 2"), std::string::npos)
        << e.what();
  }
  o.preference = false;
  try {
    prepare_packed(o, dir + "/sft");
    ADD_FAILURE() << "--max-length was taken for sft rows";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuts preference pairs (--objective dpo) only"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace anvil
