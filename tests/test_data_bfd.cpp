// data/bin_packing, data/block_writer and BlockSource: the bfd and bfd-split packings. The
// bins equal TRL's pack_dataset(strategy="bfd" | "bfd_split") on the same tokenized rows
// (tests/oracle/bfd_oracle.py): random row lengths with rows longer than seq_len, rows of one
// token, empty rows, and more rows than one 1000-row window. Then what a block brings into a
// batch (positions, padding, labels) with assistant-only labels, the file's document table,
// the cache key, and anvil train: the packing reported, a resume with another packing refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <sstream>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "data/blocks.h"
#include "data/chat_template.h"
#include "data/packing.h"
#include "data/tokenizer.h"
#include "testing.h"
#include "train/checkpoint_schedule.h"

namespace anvil {
namespace {

std::string tok_dir() { return testing::shared_dir() + "/fixtures/qwen3-tokenizer"; }
std::string convs() { return testing::shared_dir() + "/fixtures/tokenizer/conversations_public.jsonl"; }

// n text rows: some empty, some one token ("hello"), some longer than seq_len, the rest of 2 to
// seq_len words (a word a token).
std::string random_rows(uint64_t seed, int n, int64_t seq_len) {
  static const char* const kWords[] = {" the", " cat", " sat", " on", " a", " mat", " and", " dog", " ran", " far"};
  std::mt19937_64 rng(seed);
  std::string text;
  for (int r = 0; r < n; ++r) {
    const int kind = static_cast<int>(rng() % 20);
    int64_t words = 2 + static_cast<int64_t>(rng() % static_cast<uint64_t>(seq_len - 1));
    if (kind == 0) words = 0;
    if (kind >= 18) words = seq_len + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(2 * seq_len));
    std::string row = kind == 1 ? "hello" : "";
    for (int64_t w = 0; kind != 1 && w < words; ++w) row += kWords[rng() % 10];
    text += Json{{"text", row}}.dump() + "\n";
  }
  return text;
}

PrepareOptions options(const std::string& data, int64_t seq, Packing packing) {
  PrepareOptions o;
  o.tokenizer = tok_dir();
  o.data = {data};
  o.seq_len = seq;
  o.packing = packing;
  return o;
}

std::vector<Json> read_lines(const std::string& path) {
  std::vector<Json> out;
  std::istringstream in(read_file(path));
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(Json::parse(line));
  return out;
}

// Every block of a prepared folder, as a batch of one block.
std::vector<TokenBatch> batches_of(const std::string& dir) {
  DataSection d;
  const BlockSource src(d, dir, "", "", PrepareTurn{});
  std::vector<TokenBatch> out(static_cast<size_t>(src.size()));
  for (int64_t b = 0; b < src.size(); ++b) src.append(b, out[static_cast<size_t>(b)]);
  return out;
}

// The blocks of `dir` against TRL's sequences in `trl` (one JSON line each, in TRL's order):
// the same documents, ids and position_ids; then padding (pad id, labels -100, positions 0..).
void expect_same_as_trl(const std::string& dir, const std::string& trl, const std::string& what) {
  const PackedDataset file = PackedDataset::open(dir);
  const std::vector<TokenBatch> blocks = batches_of(dir);
  const std::vector<Json> lines = read_lines(trl);
  ASSERT_EQ(blocks.size(), lines.size()) << what;
  const int64_t seq = file.seq_len(), pad = file.header()["pad_id"].get<int64_t>();
  for (size_t b = 0; b < blocks.size(); ++b) {
    const Json& want = lines[b];
    const auto ids = want["input_ids"].get<std::vector<int64_t>>();
    const auto positions = want["position_ids"].get<std::vector<int64_t>>();
    const auto n = static_cast<int64_t>(ids.size());
    const std::span<const int32_t> docs = file.documents(static_cast<int64_t>(b));
    ASSERT_EQ(std::vector<int64_t>(docs.begin(), docs.end()), want["seq_lengths"].get<std::vector<int64_t>>())
        << what << " block " << b;
    const TokenBatch& got = blocks[b];
    ASSERT_EQ(got.padding, seq - n) << what << " block " << b;
    ASSERT_EQ(std::vector<int64_t>(got.ids.begin(), got.ids.begin() + n), ids) << what << " block " << b;
    ASSERT_EQ(std::vector<int64_t>(got.positions.begin(), got.positions.begin() + n), positions) << what << " " << b;
    for (int64_t t = n; t < seq; ++t) {
      const auto i = static_cast<size_t>(t);
      ASSERT_TRUE(got.ids[i] == pad && got.labels[i] == kIgnoreIndex && got.positions[i] == t - n) << what << " " << t;
    }
  }
}

TEST(BfdPacking, BinsEqualTrlPackDataset) {
  ANVIL_REQUIRE_ORACLE();
  const std::string dir = testing::temp_dir("bfd-trl");
  struct Case {
    int rows;
    int64_t seq;
  };
  Json cases = Json::array();
  std::vector<std::pair<std::string, std::string>> made;  // (anvil folder, TRL's output)
  int64_t one_token_docs = 0, split = 0, cut = 0;
  uint64_t seed = 1;
  for (const Case c : {Case{40, 16}, Case{300, 64}, Case{2300, 48}, Case{1000, 200}}) {
    const std::string rows = cat(dir, "/rows", seed, ".jsonl");
    write_file_atomic(rows, random_rows(seed++, c.rows, c.seq));
    for (const Packing p : {Packing::kBfd, Packing::kBfdSplit}) {
      const std::string out = cat(rows, ".", packing_name(p));
      const Json h = prepare_packed(options(rows, c.seq, p), out);
      split += h["split_rows"].get<int64_t>();
      cut += h["dropped_rows"].get<int64_t>();
      const PackedDataset d = PackedDataset::open(out);
      for (int64_t b = 0; b < d.num_blocks(); ++b)
        one_token_docs += std::count(d.documents(b).begin(), d.documents(b).end(), 1);
      cases.push_back({{"rows", rows}, {"seq_len", c.seq}, {"strategy", p == Packing::kBfd ? "bfd" : "bfd_split"},
                       {"out", out + ".trl.jsonl"}});
      made.emplace_back(out, out + ".trl.jsonl");
    }
  }
  EXPECT_GT(one_token_docs, 0);
  EXPECT_GT(split, 0);
  EXPECT_GT(cut, 0);
  write_file_atomic(dir + "/cases.json", cases.dump());
  const auto r = testing::run_oracle("bfd_oracle.py", {tok_dir(), dir + "/cases.json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const auto& [anvil_dir, trl] : made) expect_same_as_trl(anvil_dir, trl, anvil_dir);
}

// Each row's tokens and labels cut at seq_len (bfd-split: every piece; bfd: the first).
std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> row_pieces(const PrepareOptions& o) {
  const Tokenizer tok = Tokenizer::load(tok_dir());
  const ChatTemplate tmpl = ChatTemplate::load(tok_dir());
  const RowEncoder enc(tok, &tmpl, o.assistant_only_loss);
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> pieces;
  std::istringstream in(read_file(o.data[0]));
  TokenizedRow row;
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    enc.encode_line(line, row);
    const int64_t n = static_cast<int64_t>(row.ids.size());
    for (int64_t b = 0; b < (o.packing == Packing::kBfd ? std::min(n, int64_t{1}) : n); b += o.seq_len) {
      const int64_t e = std::min(n, b + o.seq_len);
      pieces.emplace_back(std::vector<int64_t>(row.ids.begin() + b, row.ids.begin() + e),
                          std::vector<int64_t>(row.labels.begin() + b, row.labels.begin() + e));
    }
  }
  std::sort(pieces.begin(), pieces.end());
  return pieces;
}

// Chats with assistant-only labels: each batch's documents are the rows' pieces with their
// labels, positions restart at each, padding is pad id / -100 / 0.., the counts add up.
TEST(BfdPacking, BatchesCarryDocumentsPositionsPaddingAndAssistantLabels) {
  for (const Packing p : {Packing::kBfdSplit, Packing::kBfd}) {
    PrepareOptions o = options(convs(), 128, p);
    o.assistant_only_loss = true;
    const std::string dir = testing::temp_dir("bfd-aol");
    const Json h = prepare_packed(o, dir);
    EXPECT_EQ(h["pad_id"], *Tokenizer::load(tok_dir()).token_to_id("<|endoftext|>"));
    const PackedDataset file = PackedDataset::open(dir);
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> docs;
    int64_t real = 0, padding = 0;
    for (const TokenBatch& b : batches_of(dir)) {
      ASSERT_EQ(b.ids.size(), 128u);
      ASSERT_EQ(b.labels.size(), 128u);
      ASSERT_EQ(b.positions.size(), 128u);
      for (size_t t = 0; t < 128; ++t) {
        if (b.positions[t] != 0) continue;
        size_t e = t + 1;
        while (e < 128 && b.positions[e] == b.positions[e - 1] + 1) ++e;
        if (static_cast<int64_t>(t) < b.real_tokens())
          docs.emplace_back(std::vector<int64_t>(b.ids.begin() + t, b.ids.begin() + e),
                            std::vector<int64_t>(b.labels.begin() + t, b.labels.begin() + e));
        else
          EXPECT_EQ(static_cast<int64_t>(e - t), b.padding);
      }
      real += b.real_tokens();
      padding += b.padding;
    }
    std::sort(docs.begin(), docs.end());
    EXPECT_EQ(docs, row_pieces(o)) << packing_name(p);
    EXPECT_EQ(real, h["real_tokens"].get<int64_t>());
    EXPECT_EQ(padding, h["padding_tokens"].get<int64_t>());
    EXPECT_EQ(h["documents"].get<int64_t>(), static_cast<int64_t>(docs.size()));
    EXPECT_EQ(real + (p == Packing::kBfd ? h["dropped_tokens"].get<int64_t>() : 0), h["total_tokens"].get<int64_t>());
    EXPECT_GT(h[p == Packing::kBfd ? "dropped_rows" : "split_rows"].get<int64_t>(), 0);
  }
}

// A bfd file's document table is checked when it is opened: a length past the block, a table
// that does not cover the documents, a file cut short are errors naming the file.
TEST(BfdPacking, BrokenDocumentTablesAreRefused) {
  const std::string dir = testing::temp_dir("bfd-broken");
  const Json h = prepare_packed(options(convs(), 64, Packing::kBfdSplit), dir);
  const std::string good = read_file(dir + "/packed.bin");
  const auto table = h["documents_offset"].get<size_t>() + (h["num_blocks"].get<size_t>() + 1) * 8;
  std::string bad = good;
  bad[table] = 65;  // the first document: 65 tokens in a block of 64
  bad[table + 1] = bad[table + 2] = bad[table + 3] = 0;
  for (const std::string& bytes : {bad, good.substr(0, good.size() - 4)}) {
    write_file_atomic(dir + "/packed.bin", bytes);
    try {
      PackedDataset::open(dir);
      ADD_FAILURE() << "opened";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
      EXPECT_NE(std::string(e.what()).find(dir + "/packed.bin: "), std::string::npos) << e.what();
    }
  }
}

// The cache key names the packing: each packing has its own entry, reused while it matches.
TEST(BfdPacking, CacheEntriesArePerPacking) {
  const std::string dir = testing::temp_dir("bfd-cache");
  std::vector<std::string> keys;
  for (const Packing p : {Packing::kWrapped, Packing::kBfd, Packing::kBfdSplit}) {
    const PrepareOptions o = options(convs(), 128, p);
    keys.push_back(prepare_key(o));
    EXPECT_EQ(prepare_cached(o, dir).packing(), p);
    EXPECT_EQ(prepare_cached(o, dir).path(), dir + "/" + keys.back() + "/packed.bin");
  }
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(std::unique(keys.begin(), keys.end()), keys.end());
}

std::string demo_dir() { return std::string(ANVIL_SOURCE_DIR) + "/data/demo"; }

// The demo's first chats (about 4 kB): a small eval set.
void write_held_rows(const std::string& path) {
  std::istringstream rows(read_file(demo_dir() + "/arithmetic.jsonl"));
  std::string held;
  for (std::string line; held.size() < 4000 && std::getline(rows, line);) held += line + "\n";
  write_file_atomic(path, held);
}

// anvil train on rows: the log says how the data and eval data are packed and counts real
// tokens; the checkpoint's data position names its packing, so a resume with another one is
// refused (exit 2, saying how) unless --reset-data-position starts the blocks over.
TEST(BfdPacking, TrainReportsThePackingAndResumesOnlyWithTheSame) {
  const std::string dir = testing::temp_dir("bfd-train");
  const std::string demo = demo_dir();
  write_held_rows(dir + "/held.jsonl");
  const auto train = [&](int steps, std::vector<std::string> more) {
    std::vector<std::string> a = {"train", "--device", "cpu", "--preset", "tiny", "--tokenizer", demo, "--data",
                                  demo + "/arithmetic.jsonl", "--data-cache", dir + "/cache", "--seq-len", "64",
                                  "--steps", std::to_string(steps), "--save-every", "2", "--ckpt-dir", dir + "/ckpt",
                                  "--eval-data", dir + "/held.jsonl", "--eval-packing", "wrapped"};
    a.insert(a.end(), more.begin(), more.end());
    return testing::run_anvil(a);
  };
  testing::RunResult r = train(2, {});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("data: bfd-split: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("eval data: wrapped: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" real tok/s "), std::string::npos) << r.out;
  const Json meta = json_read_file(dir + "/ckpt/step-2/meta.json");
  EXPECT_EQ(meta["data"]["packing"], "bfd-split");

  r = train(4, {"--packing", "wrapped"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("the checkpoint's data position counts bfd-split blocks, and this run's blocks are packed "
                       "wrapped"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--reset-data-position"), std::string::npos) << r.out;
  r = train(4, {"--packing", "wrapped", "--reset-data-position"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("step 4/4"), std::string::npos) << r.out;
  EXPECT_EQ(json_read_file(dir + "/ckpt/step-4/meta.json")["data"]["packing"], "wrapped");
  // The reset acts once: the settings the checkpoint keeps (anvil train --config) leave it out.
  const std::string toml = read_file(dir + "/ckpt/step-4/anvil_config.toml");
  EXPECT_NE(toml.find("packing = \"wrapped\""), std::string::npos) << toml;
  EXPECT_EQ(toml.find("reset-data-position"), std::string::npos) << toml;
  EXPECT_EQ(train(6, {}).exit_code, 2);
  r = train(6, {"--packing", "wrapped"});
  EXPECT_EQ(r.exit_code, 0) << r.out;
}

// The eval rows are packed as the training blocks are, a prepared folder's own packing included,
// unless --eval-packing says otherwise.
TEST(BfdPacking, EvalDataIsPackedAsTheTrainingData) {
  const std::string dir = testing::temp_dir("bfd-eval");
  const std::string demo = demo_dir();
  write_held_rows(dir + "/held.jsonl");
  testing::RunResult r = testing::run_anvil({"prepare", "--tokenizer", demo, "--data", dir + "/held.jsonl", "--seq-len",
                                             "64", "--packing", "wrapped", "--out", dir + "/wrapped"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const std::string eval_packing : {"same", "bfd"}) {
    r = testing::run_anvil({"train", "--device", "cpu", "--preset", "tiny", "--tokenizer", demo, "--data",
                            dir + "/wrapped", "--data-cache", dir + "/cache", "--steps", "1", "--eval-data",
                            dir + "/held.jsonl", "--eval-packing", eval_packing});
    ASSERT_EQ(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("data: wrapped: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find(eval_packing == "same" ? "eval data: wrapped: " : "eval data: bfd: "), std::string::npos)
        << r.out;
  }
}

// A stopped run's resume command leaves --reset-data-position out: the resumed run continues
// from the position its newest checkpoint records, not from the start again.
TEST(BfdPacking, ResumeCommandLeavesTheResetOut) {
  TrainCommand c;
  c.args = {"--data", "rows.jsonl", "--reset-data-position", "--packing", "wrapped"};
  EXPECT_EQ(resume_command(c), "anvil train --data rows.jsonl --packing wrapped");
}

}  // namespace
}  // namespace anvil
