// anvil prepare / anvil tokenize end to end: exit codes, output against the golden fixtures.
#include <gtest/gtest.h>

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
