// The README's quick start, tools/demo.sh, with the built binary: the demo model trained on
// data/demo/sums_train.jsonl answers at least 90% of the questions of
// data/demo/sums_heldout.jsonl, which training never sees, exactly, and every answer ends its
// turn (the demo's own bar, its figures printed), and it takes under three minutes of two CPU cores: its
// processes' CPU time (training, answering, checking) under 2 x 180 s. CPU time, not the wall
// clock, which on a shared machine also counts whatever else runs there.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "testing.h"

namespace anvil {
namespace {

// CPU seconds (user and system) of the children waited for so far.
double children_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_CHILDREN, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

// The held-out questions: the lines of data/demo/sums_heldout.jsonl.
int heldout_questions() {
  std::ifstream in(std::string(ANVIL_SOURCE_DIR) + "/data/demo/sums_heldout.jsonl");
  int n = 0;
  for (std::string line; std::getline(in, line);) n += !line.empty();
  return n;
}

TEST(Demo, AnswersHeldOutSumsAfterUnderThreeMinutes) {
  const std::string dir = testing::temp_dir("demo");
  const double cpu_before = children_cpu_seconds();
  const testing::RunResult r = testing::run_command(
      "ANVIL_BIN=" + testing::shell_quote(testing::anvil_binary()) + " ANVIL_BUILD_DIR=" + testing::shell_quote(dir) +
      " " + testing::shell_quote(std::string(ANVIL_SOURCE_DIR) + "/tools/demo.sh") + " --device cpu");
  const double cpu = children_cpu_seconds() - cpu_before;
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t at = r.out.find("held-out questions: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  int right = 0, total = 0, percent = 0, ended = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at, "held-out questions: %d/%d answered exactly (%d%%), %d ending their turn",
                        &right, &total, &percent, &ended),
            4)
      << r.out;
  EXPECT_EQ(total, heldout_questions());
  EXPECT_GE(total, 1000);
  EXPECT_GE(right * 10, total * 9) << r.out;
  EXPECT_EQ(ended, total) << r.out;
  std::printf("demo: %d/%d right, %d ending their turn, %.1f CPU seconds\n", right, total, ended, cpu);
  EXPECT_LT(cpu, 2 * 180.0) << r.out;
}

}  // namespace
}  // namespace anvil
