// Nothing a run writes is lost or overwritten silently (the tiny fixture model on the CPU):
//  - a run with --ckpt-dir saves its last step, whatever --save-every says, and a longer
//    rerun resumes from there;
//  - --export never writes into the --model folder, nor into a folder holding other files
//    (an earlier export is replaced): exit 2 before the first step, the folder untouched;
//  - an unwritable --tensorboard folder is refused up front like the other outputs;
//  - a run on two ranks prints its summary once.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/fs.h"
#include "io/checkpoint_files.h"
#include "testing.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class OutputsKept : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::temp_dir("outputs-kept"));
    testing::write_random_blocks(*dir_ + "/blocks.safetensors", 24, 37, 5);
  }
  static std::string dir() { return *dir_; }
  static std::vector<std::string> train_args(int64_t steps, const std::vector<std::string>& extra) {
    return testing::tiny_train_args(dir() + "/blocks.safetensors", steps, extra);
  }
  static std::string* dir_;
};
std::string* OutputsKept::dir_ = nullptr;

void expect_refused_before_training(const testing::RunResult& r) {
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_FALSE(has(r.out, "step 1/")) << r.out;
}

TEST_F(OutputsKept, TheLastStepIsSavedAndResumedFrom) {
  const std::string ckpt = dir() + "/ckpt-last";
  const testing::RunResult r = testing::run_anvil(train_args(7, {"--ckpt-dir", ckpt, "--save-every", "5"}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(is_directory(path_join(ckpt, checkpoint_name(5)))) << r.out;
  EXPECT_TRUE(is_directory(path_join(ckpt, checkpoint_name(7)))) << "steps 6 and 7 were not saved:\n" << r.out;

  const testing::RunResult more = testing::run_anvil(train_args(9, {"--ckpt-dir", ckpt, "--save-every", "5"}));
  ASSERT_EQ(more.exit_code, 0) << more.out;
  EXPECT_TRUE(has(more.out, "at step 7")) << more.out;
  EXPECT_FALSE(has(more.out, "step 6/9")) << more.out;

  // --resume given the folder of checkpoints: its newest complete one.
  const testing::RunResult folder = testing::run_anvil(train_args(10, {"--resume", ckpt}));
  ASSERT_EQ(folder.exit_code, 0) << folder.out;
  EXPECT_TRUE(has(folder.out, "resumed from " + path_join(ckpt, checkpoint_name(9)) + " at step 9")) << folder.out;

  // Without --save-every, the checkpoint folder still receives the end of the run.
  const std::string end_only = dir() + "/ckpt-end-only";
  const testing::RunResult e = testing::run_anvil(train_args(3, {"--ckpt-dir", end_only}));
  ASSERT_EQ(e.exit_code, 0) << e.out;
  EXPECT_EQ(list_checkpoints(end_only).size(), 1u) << e.out;
  EXPECT_TRUE(is_directory(path_join(end_only, checkpoint_name(3)))) << e.out;
}

TEST_F(OutputsKept, ExportNeverOverwritesTheModelOrForeignFiles) {
  // The --model folder itself: a copy of the fixture, so that a failure cannot harm it.
  const std::string model = dir() + "/model-copy";
  fs::create_directories(model);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(testing::shared_dir() + "/fixtures/tiny-qwen3/" + f, model + "/" + f,
                  fs::copy_options::overwrite_existing);
  const auto size_before = fs::file_size(model + "/model.safetensors");
  std::vector<std::string> args = train_args(2, {"--export", model});
  args[4] = model;  // --model
  const testing::RunResult same = testing::run_anvil(args);
  expect_refused_before_training(same);
  EXPECT_TRUE(has(same.out, "is the --model folder")) << same.out;
  EXPECT_EQ(fs::file_size(model + "/model.safetensors"), size_before);

  // A folder holding someone's files.
  const std::string foreign = dir() + "/foreign";
  fs::create_directories(foreign);
  std::ofstream(foreign + "/notes.txt") << "mine\n";
  const testing::RunResult f = testing::run_anvil(train_args(2, {"--export", foreign}));
  expect_refused_before_training(f);
  EXPECT_TRUE(has(f.out, "holds files and is not an earlier export")) << f.out;
  EXPECT_FALSE(fs::exists(foreign + "/config.json"));

  // An earlier export is replaced.
  const std::string out = dir() + "/export";
  const testing::RunResult first = testing::run_anvil(train_args(2, {"--export", out}));
  ASSERT_EQ(first.exit_code, 0) << first.out;
  const testing::RunResult again = testing::run_anvil(train_args(2, {"--export", out}));
  EXPECT_EQ(again.exit_code, 0) << again.out;
}

TEST_F(OutputsKept, AnUnwritableTensorboardFolderIsRefusedUpFront) {
  const std::string file = dir() + "/a-file";
  std::ofstream(file) << "x";
  const testing::RunResult r = testing::run_anvil(train_args(2, {"--tensorboard", file + "/tb"}));
  expect_refused_before_training(r);
  EXPECT_TRUE(has(r.out, "anvil train: --tensorboard " + file + "/tb: cannot be created")) << r.out;
}

TEST_F(OutputsKept, TwoRanksPrintTheSummaryOnce) {
  const testing::RunResult r =
      testing::run_anvil(train_args(2, {"--nproc-per-node", "2", "--micro-batch", "1"}));
  ASSERT_EQ(r.exit_code, 0) << r.out;
  size_t done = 0;
  for (size_t at = r.out.find("done: 2 steps"); at != std::string::npos; at = r.out.find("done: 2 steps", at + 1))
    ++done;
  EXPECT_EQ(done, 1u) << r.out;
}

}  // namespace
}  // namespace anvil
