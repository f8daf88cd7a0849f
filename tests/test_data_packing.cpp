// data/jsonl + data/packing: the wrapped packing of conversations_public.jsonl into 64- and
// 128-token blocks (packed_golden.json), compressed inputs, bad rows, assistant-only labels,
// the memory-mapped block file and its cache.
#include <gtest/gtest.h>
#include <zlib.h>
#include <zstd.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "data/jsonl.h"
#include "data/packing.h"
#include "testing.h"

namespace anvil {
namespace {

std::string tok_dir() { return testing::shared_dir() + "/fixtures/qwen3-tokenizer"; }
std::string convs() { return testing::shared_dir() + "/fixtures/tokenizer/conversations_public.jsonl"; }

// The wrapped packing, whose blocks the goldens hold.
PrepareOptions options(std::vector<std::string> data, int64_t seq) {
  PrepareOptions o;
  o.tokenizer = tok_dir();
  o.data = std::move(data);
  o.seq_len = seq;
  o.packing = Packing::kWrapped;
  return o;
}

TEST(Packing, MatchesGoldenBlocks) {
  const Json golden = json_read_file(testing::shared_dir() + "/fixtures/tokenizer/packed_golden.json");
  for (const int64_t seq : {64, 128}) {
    const std::string out = testing::temp_dir("pack" + std::to_string(seq));
    const Json header = prepare_packed(options({convs()}, seq), out);
    EXPECT_EQ(header["total_tokens"], golden["total_tokens"]);
    const PackedDataset d = PackedDataset::open(out);
    const Json& want = golden["blocks"][std::to_string(seq)];
    ASSERT_EQ(d.num_blocks(), static_cast<int64_t>(want.size()));
    EXPECT_FALSE(d.has_labels());
    for (int64_t b = 0; b < d.num_blocks(); ++b) {
      const std::vector<int32_t> got(d.input_ids(b), d.input_ids(b) + seq);
      ASSERT_EQ(got, want[static_cast<size_t>(b)].get<std::vector<int32_t>>()) << "block " << b;
      EXPECT_EQ(d.labels(b), d.input_ids(b));
    }
  }
}

std::string compress_gzip(const std::string& text, const std::string& path) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  return path;
}

std::string compress_zstd(const std::string& text, const std::string& path) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  out.resize(ZSTD_compress(out.data(), out.size(), text.data(), text.size(), 3));
  write_file_atomic(path, out);
  return path;
}

TEST(Jsonl, GzipAndZstdReadLikePlain) {
  const std::string text = read_file(convs());
  const std::string dir = testing::temp_dir("compressed");
  for (const std::string& path : {compress_gzip(text, dir + "/c.jsonl.gz"), compress_zstd(text, dir + "/c.jsonl.zst")}) {
    LineReader plain(convs()), packed(path);
    std::string a, b;
    int64_t lines = 0;
    while (plain.next(a)) {
      ASSERT_TRUE(packed.next(b)) << path;
      ASSERT_EQ(a, b) << path << " line " << plain.line_number();
      ++lines;
    }
    EXPECT_FALSE(packed.next(b));
    EXPECT_EQ(lines, 38);
    const Json h = prepare_packed(options({path}, 64), dir + "/out");
    EXPECT_EQ(h["num_blocks"], 89);
  }
}

TEST(Packing, BadRowNamesFileAndLineOrIsSkippedAndCounted) {
  const std::string dir = testing::temp_dir("bad");
  const std::string path = dir + "/bad.jsonl";
  write_file_atomic(path, "{\"text\": \"hello world\"}\n\n{\"text\": 5}\n{not json\n{\"messages\": []}\n{\"text\": \"more\"}\n");
  try {
    prepare_packed(options({path}, 2), dir + "/out");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);  // exit 2, as every check before training
    EXPECT_NE(std::string(e.what()).find(path + ":3: bad row: \"text\" must be a string"), std::string::npos) << e.what();
  }
  PrepareOptions o = options({path}, 2);
  o.skip_bad_rows = true;
  const Json h = prepare_packed(o, dir + "/out");
  EXPECT_EQ(h["rows"], 2);
  EXPECT_EQ(h["bad_rows"], 3);
  EXPECT_EQ(h["data"][0]["bad_rows"], 3);
}

TEST(Packing, AssistantOnlyLabelsCoverExactlyTheAssistantTurns) {
  const Tokenizer tok = Tokenizer::load(tok_dir());
  const ChatTemplate tmpl = ChatTemplate::load(tok_dir());
  const RowEncoder enc(tok, &tmpl, /*assistant_only_loss=*/true);
  TokenizedRow row;
  enc.encode_line(R"({"messages": [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "2+2?"},
      {"role": "assistant", "content": "4"}, {"role": "user", "content": "3*3?"}, {"role": "assistant", "content": "9"}]})",
                  row);
  ASSERT_EQ(row.labels.size(), row.ids.size());
  std::vector<int32_t> kept;
  for (size_t k = 0; k < row.ids.size(); ++k) {
    if (row.labels[k] == kIgnoreIndex) continue;
    EXPECT_EQ(row.labels[k], row.ids[k]);
    kept.push_back(row.ids[k]);
  }
  EXPECT_EQ(tok.decode(kept), "4<|im_end|><think>\n\n</think>\n\n9<|im_end|>");
  // Text rows have no assistant turns: refused rather than silently masked out.
  EXPECT_THROW(enc.encode_line(R"({"text": "plain"})", row), Error);

  const std::string out = testing::temp_dir("aol");
  PrepareOptions o = options({convs()}, 64);
  o.assistant_only_loss = true;
  prepare_packed(o, out);
  const PackedDataset d = PackedDataset::open(out);
  ASSERT_TRUE(d.has_labels());
  EXPECT_EQ(d.num_blocks(), 89);
  int64_t trained = 0;
  for (int64_t b = 0; b < d.num_blocks(); ++b)
    for (int64_t t = 0; t < d.seq_len(); ++t) {
      const int32_t l = d.labels(b)[t];
      ASSERT_TRUE(l == kIgnoreIndex || l == d.input_ids(b)[t]);
      trained += l != kIgnoreIndex;
    }
  EXPECT_GT(trained, 0);
  EXPECT_LT(trained, d.num_blocks() * d.seq_len());
}

TEST(Packing, CacheIsReusedWhileInputsMatchAndRebuiltWhenDataChanges) {
  const std::string dir = testing::temp_dir("cache");
  const std::string data = dir + "/d.jsonl";
  write_file_atomic(data, read_file(convs()));
  const PrepareOptions o = options({data}, 128);
  const std::string key = prepare_key(o);
  {
    const PackedDataset d = prepare_cached(o, dir + "/cache");
    EXPECT_EQ(d.path(), dir + "/cache/" + key + "/packed.bin");
    EXPECT_EQ(d.num_blocks(), 44);
  }
  write_file_atomic(dir + "/cache/" + key + "/marker", "x");  // the folder survives a reuse
  EXPECT_EQ(prepare_cached(o, dir + "/cache").header()["key"], key);
  EXPECT_TRUE(path_exists(dir + "/cache/" + key + "/marker"));
  write_file_atomic(data, read_file(convs()) + "{\"text\": \"one more row\"}\n");
  EXPECT_NE(prepare_key(o), key);
  EXPECT_EQ(prepare_cached(o, dir + "/cache").header()["rows"], 39);
}

TEST(PackedDataset, RejectsTruncatedFiles) {
  const std::string out = testing::temp_dir("trunc");
  prepare_packed(options({convs()}, 64), out);
  const std::string bytes = read_file(out + "/packed.bin");
  write_file_atomic(out + "/packed.bin", bytes.substr(0, bytes.size() - 4));
  EXPECT_THROW(PackedDataset::open(out), Error);
}

}  // namespace
}  // namespace anvil
