// data/parquet + data/source: Parquet files written by pyarrow (every codec, dictionary on
// and off, pages v1 and v2, the DELTA string encodings, small row groups and pages, nulls,
// empty lists, non-ASCII text) read row for row as pyarrow reads them, packed into the same
// blocks as the same rows in JSONL; folders and hub dataset ids; bad files named precisely.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "data/packing.h"
#include "data/source.h"
#include "testing.h"

namespace anvil {
namespace {

std::string tok_dir() { return testing::shared_dir() + "/fixtures/qwen3-tokenizer"; }
std::string bad_dir() { return testing::testdata_dir() + "/parquet"; }

// The pyarrow fixtures (tests/oracle/parquet_fixtures.py), written once per run.
const std::string& fixtures() {
  static const std::string dir = [] {
    const std::string d = testing::temp_dir("parquet");
    const testing::RunResult r = testing::run_oracle(
        "parquet_fixtures.py", {testing::shared_dir() + "/fixtures/tokenizer/conversations_public.jsonl", d});
    if (r.exit_code != 0) throw std::runtime_error("parquet_fixtures.py failed: " + r.out);
    return d;
  }();
  return dir;
}

#define NEED_PYARROW() \
  ANVIL_REQUIRE_ORACLE(); \
  fixtures()

std::vector<std::string> parquet_fixtures() {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(fixtures()))
    if (e.path().extension() == ".parquet") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::string expected_of(const std::string& name) { return fixtures() + "/" + name + ".expected.jsonl"; }
std::string parquet_of(const std::string& name) { return fixtures() + "/" + name + ".parquet"; }

// Every row of a file through RowReader, in small batches so that they cross row groups.
std::vector<OrderedJson> read_rows(const std::string& file, size_t batch_rows = 5) {
  std::vector<OrderedJson> rows;
  auto reader = RowReader::open(file);
  while (auto batch = reader->next(batch_rows, 1 << 20)) {
    EXPECT_LE(batch->size(), batch_rows);
    for (size_t i = 0; i < batch->size(); ++i) rows.push_back(batch->row(i));
  }
  return rows;
}

TEST(Parquet, RowsMatchPyarrow) {
  NEED_PYARROW();
  const std::vector<std::string> names = parquet_fixtures();
  ASSERT_GE(names.size(), 28u);
  for (const std::string& name : names) {
    SCOPED_TRACE(name);
    const std::vector<OrderedJson> got = read_rows(parquet_of(name));
    const std::vector<OrderedJson> want = read_rows(expected_of(name), 1000);
    ASSERT_EQ(got.size(), want.size());
    if (name != "empty") {
      ASSERT_GT(got.size(), 20u);
    }
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "row " << i;
  }
}

void expect_same_blocks(const std::string& a, const std::string& b) {
  const PackedDataset x = PackedDataset::open(a), y = PackedDataset::open(b);
  ASSERT_EQ(x.num_blocks(), y.num_blocks());
  ASSERT_EQ(x.has_labels(), y.has_labels());
  for (int64_t k = 0; k < x.num_blocks(); ++k) {
    ASSERT_TRUE(std::equal(x.input_ids(k), x.input_ids(k) + x.seq_len(), y.input_ids(k))) << "block " << k;
    ASSERT_TRUE(std::equal(x.labels(k), x.labels(k) + x.seq_len(), y.labels(k))) << "block " << k;
  }
}

void expect_packs_alike(const std::vector<std::string>& parquet, const std::vector<std::string>& jsonl, bool aol) {
  PrepareOptions o;
  o.tokenizer = tok_dir();
  o.seq_len = 64;
  o.skip_bad_rows = true;  // the null and empty rows are bad in both forms
  o.assistant_only_loss = aol;
  o.data = parquet;
  const std::string pa = testing::temp_dir("pq-pack");
  const Json hp = prepare_packed(o, pa);
  o.data = jsonl;
  const std::string ja = testing::temp_dir("jl-pack");
  const Json hj = prepare_packed(o, ja);
  for (const char* k : {"rows", "bad_rows", "total_tokens", "num_blocks"}) EXPECT_EQ(hp[k], hj[k]) << k;
  for (size_t f = 0; f < parquet.size(); ++f) {
    EXPECT_EQ(hp["data"][f]["rows"], hj["data"][f]["rows"]) << parquet[f];
    EXPECT_EQ(hp["data"][f]["bad_rows"], hj["data"][f]["bad_rows"]) << parquet[f];
  }
  expect_same_blocks(pa, ja);
}

TEST(Parquet, PacksLikeTheSameRowsInJsonl) {
  NEED_PYARROW();
  // Every fixture, one after the other (one prepare each way keeps the test short).
  std::vector<std::string> parquet, jsonl;
  for (const std::string& name : parquet_fixtures()) {
    parquet.push_back(parquet_of(name));
    jsonl.push_back(expected_of(name));
  }
  expect_packs_alike(parquet, jsonl, false);
  SCOPED_TRACE("assistant-only labels");
  expect_packs_alike({parquet_of("chats-zstd-dict-v2"), parquet_of("chats-delta_byte_array-v1")},
                     {expected_of("chats-zstd-dict-v2"), expected_of("chats-delta_byte_array-v1")}, true);
}

TEST(Parquet, BadRowSaysWhichRow) {
  NEED_PYARROW();
  PrepareOptions o;
  o.tokenizer = tok_dir();
  o.seq_len = 64;
  o.data = {parquet_of("chats-snappy-dict-v1")};
  try {
    prepare_packed(o, testing::temp_dir("pq-bad-row"));
    FAIL() << "no error";
  } catch (const Error& e) {
    // Row 39 is the first edge case: messages null (38 chats before it).
    EXPECT_NE(std::string(e.what()).find("chats-snappy-dict-v1.parquet: row 39: bad row: \"messages\" must be a non-empty array"),
              std::string::npos)
        << e.what();
  }
}

TEST(DataSource, FolderInNameOrder) {
  const std::string d = testing::temp_dir("src-folder");
  for (const char* f : {"b.parquet", "a.jsonl.zst", "c.jsonl", "d.jsonl.gz", "notes.txt", "packed.json"})
    write_file_atomic(path_join(d, f), "x");
  std::filesystem::create_directory(path_join(d, "sub.parquet"));
  const std::vector<std::string> got = resolve_data_source(d);
  const std::vector<std::string> want = {path_join(d, "a.jsonl.zst"), path_join(d, "b.parquet"), path_join(d, "c.jsonl"),
                                         path_join(d, "d.jsonl.gz")};
  EXPECT_EQ(got, want);
  const std::string empty = testing::temp_dir("src-empty");
  EXPECT_THROW(resolve_data_source(empty), Error);
  EXPECT_FALSE(is_packed_dataset(d));
  write_file_atomic(path_join(empty, "packed.bin"), "x");
  EXPECT_TRUE(is_packed_dataset(empty));
}

// A hub cache with datasets--org--chats: refs/main -> snapshot abc, a default config under
// data/ and a config "extra"; a stale snapshot beside it.
std::string make_hub_cache() {
  const std::string cache = testing::temp_dir("hub");
  const std::string root = path_join(cache, "datasets--org--chats");
  make_directories(path_join(root, "refs"));
  write_file_atomic(path_join(root, "refs/main"), "abc\n");
  for (const char* f : {"snapshots/abc/data/train-00001-of-00002.parquet", "snapshots/abc/data/train-00000-of-00002.parquet",
                        "snapshots/abc/data/test-00000-of-00001.parquet", "snapshots/abc/extra/train-00000-of-00001.parquet",
                        "snapshots/old/data/train-00000-of-00001.parquet"}) {
    make_directories(std::filesystem::path(path_join(root, f)).parent_path().string());
    write_file_atomic(path_join(root, f), "x");
  }
  return cache;
}

struct EnvGuard {
  explicit EnvGuard(const std::string& hub) {
    setenv("HF_HUB_CACHE", hub.c_str(), 1);
    unsetenv("HF_HOME");
  }
  ~EnvGuard() { unsetenv("HF_HUB_CACHE"); }
};

TEST(DataSource, HubDatasetFromTheCache) {
  const std::string cache = make_hub_cache();
  const EnvGuard env(cache);
  const std::string snap = path_join(cache, "datasets--org--chats/snapshots/abc");
  EXPECT_EQ(resolve_data_source("org/chats"),
            (std::vector<std::string>{snap + "/data/train-00000-of-00002.parquet", snap + "/data/train-00001-of-00002.parquet"}));
  EXPECT_EQ(resolve_data_source("org/chats", "test"), std::vector<std::string>{snap + "/data/test-00000-of-00001.parquet"});
  EXPECT_EQ(resolve_data_source("org/chats", "train", "extra"),
            std::vector<std::string>{snap + "/extra/train-00000-of-00001.parquet"});
  const auto message = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string no_split = message([] { resolve_data_source("org/chats", "validation"); });
  EXPECT_NE(no_split.find("no validation-*.parquet"), std::string::npos) << no_split;
  EXPECT_NE(no_split.find("splits there: test, train"), std::string::npos) << no_split;
  const std::string no_config = message([] { resolve_data_source("org/chats", "train", "nope"); });
  EXPECT_NE(no_config.find("/nope (no such folder"), std::string::npos) << no_config;
  const std::string missing = message([] { resolve_data_source("org/other"); });
  EXPECT_NE(missing.find("looked in " + path_join(cache, "datasets--org--other")), std::string::npos) << missing;
  EXPECT_NE(message([] { resolve_data_source("no/such/file.parquet"); }).find("no such file or folder"), std::string::npos);
  // A mistyped local file is a path, not a hub id: no download hint.
  const std::string local = message([] { resolve_data_source("mydata/nope.jsonl"); });
  EXPECT_EQ(local, "data mydata/nope.jsonl: no such file or folder") << local;
}

TEST(DataSource, PrepareFromAHubIdOnTheCommandLine) {
  NEED_PYARROW();
  const std::string cache = testing::temp_dir("hub-cli");
  const std::string data = path_join(cache, "datasets--trl-lib--chats/snapshots/0123/data");
  make_directories(data);
  make_directories(path_join(cache, "datasets--trl-lib--chats/refs"));
  write_file_atomic(path_join(cache, "datasets--trl-lib--chats/refs/main"), "0123");
  std::filesystem::copy_file(parquet_of("chats-snappy-dict-v2"), path_join(data, "train-00000-of-00002.parquet"));
  std::filesystem::copy_file(parquet_of("chats-zstd-plain-v1"), path_join(data, "train-00001-of-00002.parquet"));
  const std::string out = testing::temp_dir("hub-cli-out");
  const testing::RunResult r = testing::run_command(
      cat("HF_HUB_CACHE='", cache, "' '", testing::anvil_binary(), "' prepare --tokenizer '", tok_dir(),
          "' --data trl-lib/chats --seq-len 64 --skip-bad-rows --out '", out, "'"));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  PrepareOptions o;
  o.tokenizer = tok_dir();
  o.seq_len = 64;
  o.skip_bad_rows = true;
  o.data = {expected_of("chats-snappy-dict-v2"), expected_of("chats-zstd-plain-v1")};
  const std::string want = testing::temp_dir("hub-cli-want");
  prepare_packed(o, want);
  expect_same_blocks(out, want);

  const testing::RunResult miss = testing::run_command(
      cat("HF_HUB_CACHE='", cache, "' '", testing::anvil_binary(), "' prepare --tokenizer '", tok_dir(),
          "' --data trl-lib/chats --split test --seq-len 64 --out '", out, "'"));
  EXPECT_NE(miss.exit_code, 0);
  EXPECT_NE(miss.out.find("no test-*.parquet (or .jsonl) files in"), std::string::npos) << miss.out;
  EXPECT_NE(miss.out.find("splits there: train"), std::string::npos) << miss.out;
}

// Per logged step, "loss" and "eval_loss" (when present) of a --metrics file.
std::vector<std::pair<double, double>> losses(const std::string& metrics) {
  std::vector<std::pair<double, double>> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const Json j = Json::parse(line);
    if (j.contains("loss")) out.emplace_back(j["loss"].get<double>(), j.value("eval_loss", -1.0));
  }
  return out;
}

// anvil train from a hub id (training split and --eval-split test) trains exactly as from
// the same rows in JSONL files.
TEST(DataSource, TrainFromAHubDatasetAsFromJsonl) {
  NEED_PYARROW();
  const std::string demo = std::string(ANVIL_SOURCE_DIR) + "/data/demo";
  const std::string dir = testing::temp_dir("hub-train");
  {
    std::ifstream in(demo + "/arithmetic.jsonl");
    std::ofstream train_rows(dir + "/rows.jsonl"), eval_rows(dir + "/held.jsonl");
    std::string line;
    for (int i = 0; i < 240 && std::getline(in, line); ++i) (i < 200 ? train_rows : eval_rows) << line << "\n";
  }
  const std::string snap = path_join(dir, "hub/datasets--demo--arith/snapshots/s1/data");
  make_directories(snap);
  make_directories(path_join(dir, "hub/datasets--demo--arith/refs"));
  write_file_atomic(path_join(dir, "hub/datasets--demo--arith/refs/main"), "s1\n");
  for (const auto& [from, to] : {std::pair{"rows.jsonl", "train-00000-of-00001.parquet"},
                                 std::pair{"held.jsonl", "test-00000-of-00001.parquet"}}) {
    const testing::RunResult r = testing::run_command(
        testing::shell_quote(testing::oracle_python()) +
        " -c 'import sys, pyarrow.json as j, pyarrow.parquet as p; p.write_table(j.read_json(sys.argv[1]), sys.argv[2])' " +
        testing::shell_quote(path_join(dir, from)) + " " + testing::shell_quote(path_join(snap, to)));
    ASSERT_EQ(r.exit_code, 0) << r.out;
  }
  const auto train = [&](const std::string& data, const std::vector<std::string>& eval, const std::string& tag) {
    std::string cmd = cat("HF_HUB_CACHE=", testing::shell_quote(dir + "/hub"), " ", testing::shell_quote(testing::anvil_binary()));
    std::vector<std::string> args = {"train", "--device", "cpu", "--preset", "tiny", "--tokenizer", demo, "--data", data,
                                     "--data-cache", dir + "/cache-" + tag, "--seq-len", "64", "--steps", "3",
                                     "--micro-batch", "2", "--log-every", "1", "--metrics", dir + "/" + tag + ".jsonl",
                                     "--assistant-only-loss"};
    args.insert(args.end(), eval.begin(), eval.end());
    for (const std::string& a : args) cmd.append(" ").append(testing::shell_quote(a));
    const testing::RunResult r = testing::run_command(cmd);
    EXPECT_EQ(r.exit_code, 0) << r.out;
    return losses(dir + "/" + tag + ".jsonl");
  };
  const auto hub = train("demo/arith", {"--eval-data", "demo/arith", "--eval-split", "test"}, "hub");
  const auto jsonl = train(dir + "/rows.jsonl", {"--eval-data", dir + "/held.jsonl"}, "jsonl");
  ASSERT_EQ(hub.size(), 3u);
  EXPECT_EQ(hub, jsonl);  // bit for bit: the same blocks in the same order
  EXPECT_GT(hub.back().second, 0);  // the final evaluation ran
}

// The small hand-made bad files of tests/data/parquet (make_bad.py).
TEST(Parquet, BadFilesSayWhatIsWrong) {
  const struct {
    const char* file;
    const char* says;
  } cases[] = {
      {"bad-magic.parquet", "bad-magic.parquet: not a Parquet file (no PAR1 magic at the start)"},
      {"truncated.parquet", "truncated.parquet: truncated Parquet file (no PAR1 magic at the end)"},
      {"footer-length.parquet", "footer-length.parquet: footer length 332 is past the start of the file"},
      {"corrupt-footer.parquet", "corrupt-footer.parquet: footer: corrupt metadata"},
      {"brotli.parquet", "brotli.parquet: row group 0, column text: codec BROTLI is not supported"},
      {"int-text.parquet", "int-text.parquet: column text: type INT64, expected strings (BYTE_ARRAY)"},
      {"no-columns.parquet", "no-columns.parquet: no \"messages\" or \"text\" column (columns: body)"},
      {"corrupt-page.parquet", "corrupt-page.parquet: row group 0, column text: truncated PLAIN value"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.file);
    try {
      read_rows(path_join(bad_dir(), c.file));
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(c.says), std::string::npos) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line";
    }
  }
  const std::vector<OrderedJson> good = read_rows(path_join(bad_dir(), "good.parquet"));
  ASSERT_EQ(good.size(), 3u);
  EXPECT_EQ(good[2], OrderedJson::parse(R"({"text": "three"})"));
}

}  // namespace
}  // namespace anvil
