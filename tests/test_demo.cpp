// The README's quick start, tools/demo.sh, with the built binary: the tiny preset trained on
// the one-digit arithmetic chats answers at least 45 of the 50 quiz questions exactly
// (the demo's own bar, its figure printed), and it takes under three minutes of two CPU
// cores: its processes' CPU time (training, answering, checking) under 2 x 180 s. CPU time,
// not the wall clock, which on a shared machine also counts whatever else runs there.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <cstdio>
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

TEST(Demo, AnswersTheQuizAfterUnderThreeMinutes) {
  const std::string dir = testing::temp_dir("demo");
  const double cpu_before = children_cpu_seconds();
  const testing::RunResult r = testing::run_command(
      "ANVIL_BIN=" + testing::shell_quote(testing::anvil_binary()) + " ANVIL_BUILD_DIR=" + testing::shell_quote(dir) +
      " " + testing::shell_quote(std::string(ANVIL_SOURCE_DIR) + "/tools/demo.sh") + " --device cpu");
  const double cpu = children_cpu_seconds() - cpu_before;
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const size_t at = r.out.find("quiz questions: ");
  ASSERT_NE(at, std::string::npos) << r.out;
  int right = 0, total = 0;
  ASSERT_EQ(std::sscanf(r.out.c_str() + at, "quiz questions: %d/%d", &right, &total), 2) << r.out;
  EXPECT_EQ(total, 50);
  EXPECT_GE(right, 45) << r.out;
  std::printf("demo: %d/%d right, %.1f CPU seconds\n", right, total, cpu);
  EXPECT_LT(cpu, 2 * 180.0) << r.out;
}

}  // namespace
}  // namespace anvil
