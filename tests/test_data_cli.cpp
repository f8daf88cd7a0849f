// anvil prepare / anvil tokenize end to end: exit codes, output against the golden fixtures.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "core/json.h"
#include "data/packing.h"
#include "testing.h"

namespace anvil {
namespace {

std::string fixtures() { return testing::shared_dir() + "/fixtures"; }

TEST(PrepareCli, WritesGoldenBlocksAndRejectsBadUsage) {
  const std::string out = testing::temp_dir("cli-prepare");
  const auto r = testing::run_anvil({"prepare", "--tokenizer", fixtures() + "/qwen3-tokenizer", "--data",
                                     fixtures() + "/tokenizer/conversations_public.jsonl", "--seq-len", "128",
                                     "--out", out, "--packing", "wrapped"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("44 blocks of 128 tokens from 38 rows"), std::string::npos) << r.out;
  const PackedDataset d = PackedDataset::open(out);
  const Json golden = json_read_file(fixtures() + "/tokenizer/packed_golden.json");
  ASSERT_EQ(d.num_blocks(), 44);
  EXPECT_EQ(std::vector<int32_t>(d.input_ids(43), d.input_ids(43) + 128),
            golden["blocks"]["128"][43].get<std::vector<int32_t>>());

  EXPECT_EQ(testing::run_anvil({"prepare", "--tokenizer", "x", "--seq-len", "8", "--out", out}).exit_code, 2);
  const auto missing = testing::run_anvil({"prepare", "--tokenizer", fixtures() + "/qwen3-tokenizer", "--data",
                                           out + "/nope.jsonl", "--seq-len", "8", "--out", out});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.out.find("nope.jsonl"), std::string::npos) << missing.out;
}

// Rows with nothing to learn under --assistant-only-loss (no assistant turn) are refused
// at prepare time, naming the cause and the first such row, when no row has a target; said
// (the run goes on) when some rows have one.
TEST(PrepareCli, RowsWithNoTargetUnderAssistantOnlyLoss) {
  const std::string dir = testing::temp_dir("cli-no-targets");
  const std::string system_only = dir + "/system.jsonl", mixed = dir + "/mixed.jsonl";
  const std::string sys = R"({"messages": [{"role": "system", "content": "You are terse."}, )"
                          R"({"role": "user", "content": "Hello there"}]})";
  const std::string chat = R"({"messages": [{"role": "user", "content": "Hi"}, )"
                           R"({"role": "assistant", "content": "Hello! How can I help?"}]})";
  {
    std::ofstream(system_only) << sys << "\n" << sys << "\n";
    std::ofstream(mixed) << chat << "\n" << sys << "\n" << chat << "\n";
  }
  auto prepare = [&](const std::string& data, const std::string& out) {
    return testing::run_anvil({"prepare", "--tokenizer", fixtures() + "/qwen3-tokenizer", "--data", data,
                               "--seq-len", "32", "--assistant-only-loss", "--out", out});
  };
  const auto none = prepare(system_only, dir + "/none");
  EXPECT_EQ(none.exit_code, 2) << none.out;
  EXPECT_NE(none.out.find("no row has a token to learn from (--assistant-only-loss keeps the assistant turns' "
                          "tokens alone, and no row has one; the first: " + system_only + ":1)"),
            std::string::npos) << none.out;
  const auto some = prepare(mixed, dir + "/some");
  EXPECT_EQ(some.exit_code, 0) << some.out;
  EXPECT_NE(some.out.find("1 of 3 rows have no token to learn from"), std::string::npos) << some.out;
  EXPECT_NE(some.out.find(mixed + ":2)"), std::string::npos) << some.out;
}

TEST(TokenizeCli, ChatRowsGiveGoldenRenderingsAndIds) {
  const auto r = testing::run_command(testing::anvil_binary() + " tokenize --chat --tokenizer " + fixtures() +
                                      "/qwen3-tokenizer < " + fixtures() + "/tokenizer/conversations_public.jsonl");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const Json golden = json_read_file(fixtures() + "/tokenizer/chat_golden.json")["chats"];
  std::istringstream lines(r.out);
  std::string line;
  size_t n = 0;
  while (std::getline(lines, line)) {
    ASSERT_LT(n, golden.size());
    const Json j = Json::parse(line);
    EXPECT_EQ(j["rendered"], golden[n]["rendered"]) << "row " << n;
    EXPECT_EQ(j["ids"], golden[n]["ids"]) << "row " << n;
    ++n;
  }
  EXPECT_EQ(n, golden.size());

  const auto text = testing::run_command("printf '{\"text\": \"Hello world\"}\\n\\n{\"text\": 3}\\n' | " +
                                         testing::anvil_binary() + " tokenize --tokenizer " + fixtures() + "/qwen3-tokenizer");
  EXPECT_EQ(text.exit_code, 2);
  EXPECT_NE(text.out.find("{\"ids\":[9707,1879]}"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("stdin:3: bad row"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace anvil
