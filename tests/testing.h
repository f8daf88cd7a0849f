// Test helpers: fixture paths, tensor comparison with useful failure messages, running the
// anvil binary, temporary folders.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace anvil::testing {

std::string shared_dir();    // ../shared beside the project (the golden fixtures)
std::string testdata_dir();  // tests/data of the project
std::string anvil_binary();
std::string temp_dir(const std::string& tag);  // a fresh empty folder, removed at exit
// A golden model fixture by name: tiny-qwen3 and tiny-qwen3-untied from the shared
// fixtures, tiny-qwen2 and tiny-llama3 from the project's test data.
std::string fixture_dir(const std::string& name);
// The four golden model fixtures, and their names as test-name suffixes (dashes become _).
std::vector<std::string> golden_models();
std::string test_suffix(const std::string& name);

struct RunResult {
  int exit_code = -1;
  std::string out;  // stdout and stderr together
};
RunResult run_anvil(const std::vector<std::string>& args);
RunResult run_command(const std::string& shell_command);

// Relative L2 error ||a - b|| / ||b||; b is the reference.
double rel_l2(const double* a, const double* b, size_t n);
double rel_l2(const float* a, const double* b, size_t n);
// Fails the test with max abs error, max rel error and the first index past `tol` when the
// relative L2 error exceeds tol.
::testing::AssertionResult close_rel_l2(const std::vector<double>& got, const std::vector<double>& want,
                                        double tol);

}  // namespace anvil::testing
