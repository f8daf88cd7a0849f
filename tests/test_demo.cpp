// The README's quick start, tools/demo.sh, with the built binary: the tiny preset trained on
// the one-digit arithmetic chats answers at least 45 of the 50 held-out questions exactly
// (the demo's own bar, its figure printed), and its training takes under three minutes on
// the CPU (measured by the run itself: the "elapsed" of its last line).
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "testing.h"

namespace anvil {
namespace {

TEST(Demo, AnswersTheHeldOutQuestionsAfterUnderThreeMinutes) {
  const std::string dir = testing::temp_dir("demo");
  const testing::RunResult r = testing::run_command(
      "ANVIL_BIN=" + testing::shell_quote(testing::anvil_binary()) + " ANVIL_BUILD_DIR=" + testing::shell_quote(dir) +
      " " + testing::shell_quote(std::string(ANVIL_SOURCE_DIR) + "/tools/demo.sh") + " --device cpu");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t at = r.out.find("held-out questions: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  int right = 0, total = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at, "held-out questions: %d/%d", &right, &total), 2) << r.out;
  EXPECT_EQ(total, 50);
  EXPECT_GE(right, 45) << r.out;
  const size_t fin = r.out.find("elapsed ", r.out.find("finished: "));
  ASSERT_NE(fin, std::string::npos) << r.out;
  int h = 0, m = 0, s = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str() + fin, "elapsed %d:%d:%d", &h, &m, &s), 3) << r.out;
  EXPECT_LT(h * 3600 + m * 60 + s, 180) << r.out;
}

}  // namespace
}  // namespace anvil
