// Evaluation during training (--eval-data, --eval-every) on CPU ranks, the tiny fixture:
//  - evaluating changes nothing: the training losses and the final weights are the same
//    bits with and without it, on 1 rank and on 2 fsdp ranks;
//  - the eval loss is the token-weighted mean over the whole set: the final one equals the
//    loss `anvil grad` computes on the exported fp32 weights with the eval blocks as one
//    batch (bit for bit on one rank, one micro-batch; within float rounding on 2 ranks,
//    where an odd set leaves one rank a padding block);
//  - the eval set is packed as the training data, --assistant-only-loss included: its
//    target count is that of `anvil prepare --assistant-only-loss` on the same rows;
//  - on 2 fsdp ranks evaluated after every step, the eval losses are ddp's: the last
//    block FSDP keeps gathered after a forward is never reused across an update;
//  - eval_loss in the --metrics lines, the log line, the run's last line, the ETA;
//  - --eval-max-blocks N evaluates the set's first N blocks; the ETA counts the evaluations
//    left apart from the steps;
//  - a hub id without --eval-split is evaluated on its validation split, never silently on
//    the training split (refused without a held-out split); bad settings exit 2;
//  - --keep-best keeps the checkpoint of the lowest eval loss beside --keep-last's.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <set>

#include "core/fs.h"
#include "core/json.h"
#include "data/packing.h"
#include "io/safetensors.h"
#include "model/weights.h"
#include "train/eval.h"
#include "train/open_run.h"
#include "testing.h"
#include "metrics_losses.h"

namespace anvil {
namespace {

struct TrainRun {
  int exit_code = -1;
  std::string out;
  std::map<int64_t, double> losses, eval_losses;
  std::map<std::string, std::vector<double>> params;
};

class Eval : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::temp_dir("eval"));
    blocks("train", 16, 1);
    blocks("eval2", 2, 2);
    blocks("eval3", 3, 3);
  }
  static void blocks(const std::string& name, int64_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<int64_t> ids(static_cast<size_t>(n * 37));
    for (auto& x : ids) x = static_cast<int64_t>(rng() % 1000);
    SafetensorsWriter w;
    w.add("input_ids", DType::kI64, {n, 37}, ids.data());
    w.write(*dir_ + "/" + name + ".safetensors");
  }

  // 6 steps of 2 sequences, fp32 export.
  static TrainRun train(const std::string& tag, int nproc, const std::vector<std::string>& extra) {
    const std::string out = *dir_ + "/" + tag;
    std::vector<std::string> args = {"train", "--device", "cpu", "--model", testing::shared_dir() + "/fixtures/tiny-qwen3",
                                     "--data", *dir_ + "/train.safetensors", "--steps", "6", "--micro-batch",
                                     std::to_string(2 / nproc), "--lr", "1e-3", "--log-every", "1", "--metrics",
                                     out + ".jsonl", "--export", out, "--export-dtype", "fp32"};
    if (nproc > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(nproc), "--mode", "fsdp"});
    args.insert(args.end(), extra.begin(), extra.end());
    const testing::RunResult r = testing::run_anvil(args);
    TrainRun run;
    run.exit_code = r.exit_code;
    run.out = r.out;
    const testing::MetricsLosses m = testing::read_metrics_losses(out + ".jsonl");
    run.losses = m.loss;
    run.eval_losses = m.eval_loss;
    if (r.exit_code == 0) {
      SafetensorsFile f(out + "/model.safetensors");
      for (auto& t : f.tensors()) run.params[t.name] = read_as_f64(t);
    }
    return run;
  }

  // anvil grad's loss of the exported model of `tag` on a token file.
  static float grad_loss(const std::string& tag, const std::string& tokens) {
    const auto r = testing::run_anvil({"grad", "--device", "cpu", "--model", *dir_ + "/" + tag, "--tokens",
                                       *dir_ + "/" + tokens + ".safetensors", "--out", *dir_ + "/" + tag + "-grad.safetensors"});
    EXPECT_EQ(r.exit_code, 0) << r.out;
    SafetensorsFile f(*dir_ + "/" + tag + "-grad.safetensors");
    return static_cast<float>(read_as_f64(*f.find("loss"))[0]);
  }

  static std::string* dir_;
};
std::string* Eval::dir_ = nullptr;

// The forward-only path on the CPU: the loss of loss_and_grads, bit for bit, with the
// gradients it left untouched (ddp and fsdp, tied and untied output layer).
TEST(ForwardLoss, IsTheLossAndLeavesGradientsAlone) {
  for (const char* name : {"tiny-qwen3", "tiny-qwen3-untied"}) {
    const std::string dir = testing::fixture_dir(name);
    const ModelConfig cfg = load_config(dir);
    SafetensorsFile gold(dir + "/golden_step0.safetensors");
    const SafeTensorInfo& ids = gold.get("input_ids");
    for (ParallelMode mode : {ParallelMode::kDdp, ParallelMode::kFsdp}) {
      TrainConfig c;
      c.model.device = "cpu";
      c.parallel.mode = mode;
      c.data.micro_batch = ids.shape[0];
      c.data.seq_len = ids.shape[1];
      ParamTable table(cfg, 1);
      HostUnits w = make_host_units(table);
      load_hf_weights(dir, table, w);
      const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(w), c, c.data.seq_len, nullptr, 0);
      Trainer& trainer = *t;
      TokenBatch b;
      b.ids = read_as_i64(ids);
      const double loss = trainer.loss_and_grads(b, nullptr);
      const HostUnits before = trainer.grads();
      const Trainer::LossSum e = trainer.forward_loss(b);
      EXPECT_EQ(e.sum / static_cast<double>(e.tokens), loss) << name;
      EXPECT_EQ(e.tokens, static_cast<int64_t>(b.ids.size()) - c.data.micro_batch) << name;
      EXPECT_EQ(trainer.grads(), before) << name << ": forward_loss touched the gradients";
    }
  }
}

TEST_F(Eval, ChangesNothingAndIsTheLossOfTheWholeSet) {
  const TrainRun plain = train("plain", 1, {});
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  const TrainRun eval = train("eval", 1, {"--eval-data", *dir_ + "/eval2.safetensors", "--eval-every", "2"});
  ASSERT_EQ(eval.exit_code, 0) << eval.out;
  ASSERT_EQ(plain.losses.size(), 6u);
  EXPECT_EQ(eval.losses, plain.losses);
  EXPECT_EQ(eval.params, plain.params);
  ASSERT_EQ(eval.eval_losses.size(), 3u) << eval.out;
  for (int64_t s : {2, 4, 6}) EXPECT_TRUE(eval.eval_losses.count(s)) << s;
  EXPECT_LT(eval.eval_losses.at(6), eval.eval_losses.at(2)) << "the model learns the repeated data";
  // One rank, the set is one micro-batch: the same float sum anvil grad makes.
  EXPECT_EQ(static_cast<float>(eval.eval_losses.at(6)), grad_loss("eval", "eval2"));
  EXPECT_NE(eval.out.find("step 6/6  eval loss"), std::string::npos) << eval.out;
  EXPECT_NE(eval.out.find("(2 blocks, 72 tokens"), std::string::npos) << eval.out;
  EXPECT_NE(eval.out.find("ETA 0:00:"), std::string::npos) << eval.out;
  char final_line[200];
  std::snprintf(final_line, sizeof final_line, "finished: final loss %.4f, eval loss %.4f, elapsed 0:0",
                eval.losses.at(6), eval.eval_losses.at(6));
  EXPECT_NE(eval.out.find(final_line), std::string::npos) << eval.out;
  EXPECT_NE(eval.out.find("model exported to " + *dir_ + "/eval\n"), std::string::npos) << eval.out;
}

TEST_F(Eval, AllRanksAndPadding) {
  const TrainRun plain = train("plain2", 2, {});
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  // 3 blocks on 2 ranks of micro-batch 1: two rounds, the second with one padding block.
  const TrainRun eval = train("eval2r", 2, {"--eval-data", *dir_ + "/eval3.safetensors"});
  ASSERT_EQ(eval.exit_code, 0) << eval.out;
  EXPECT_EQ(eval.losses, plain.losses);
  EXPECT_EQ(eval.params, plain.params);
  ASSERT_EQ(eval.eval_losses.size(), 1u) << "only at the end without --eval-every";
  const double want = grad_loss("eval2r", "eval3");
  EXPECT_NEAR(eval.eval_losses.at(6), want, 2e-6 * want);
  EXPECT_NE(eval.out.find("(3 blocks, 108 tokens"), std::string::npos) << eval.out;
}

// FSDP keeps the last block gathered from its forward to its backward; an evaluation's
// forward has no backward, so its kept copy must not be used after the next update. One
// eval round (odd) after every step: the eval losses are ddp's (which keeps nothing), and
// the training is unchanged.
TEST_F(Eval, FsdpEvalEveryStepUsesTheUpdatedWeights) {
  const TrainRun plain = train("plain_fsdp", 2, {});
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  const std::vector<std::string> every = {"--eval-data", *dir_ + "/eval2.safetensors", "--eval-every", "1"};
  const TrainRun fsdp = train("every_fsdp", 2, every);
  std::vector<std::string> ddp_args = every;
  ddp_args.insert(ddp_args.end(), {"--mode", "ddp"});
  const TrainRun ddp = train("every_ddp", 2, ddp_args);
  ASSERT_EQ(fsdp.exit_code, 0) << fsdp.out;
  ASSERT_EQ(ddp.exit_code, 0) << ddp.out;
  EXPECT_EQ(fsdp.losses, plain.losses);
  EXPECT_EQ(fsdp.params, plain.params);
  ASSERT_EQ(fsdp.eval_losses.size(), 6u) << fsdp.out;
  ASSERT_EQ(ddp.eval_losses.size(), 6u) << ddp.out;
  for (int64_t s = 1; s <= 6; ++s)
    EXPECT_NEAR(fsdp.eval_losses.at(s), ddp.eval_losses.at(s), 1e-6 * ddp.eval_losses.at(s)) << "step " << s;
}

TEST_F(Eval, PackedLikeTrainingDataWithAssistantOnlyLoss) {
  const std::string demo = std::string(ANVIL_SOURCE_DIR) + "/data/demo";
  std::ifstream in(demo + "/arithmetic.jsonl");
  std::ofstream train_rows(*dir_ + "/rows.jsonl"), eval_rows(*dir_ + "/held.jsonl");
  std::string line;
  for (int i = 0; i < 240 && std::getline(in, line); ++i) (i < 200 ? train_rows : eval_rows) << line << "\n";
  train_rows.close();
  eval_rows.close();
  auto r = testing::run_anvil({"prepare", "--tokenizer", demo, "--data", *dir_ + "/held.jsonl", "--seq-len", "64",
                               "--assistant-only-loss", "--out", *dir_ + "/held-packed", "--packing", "wrapped"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const PackedDataset held = PackedDataset::open(*dir_ + "/held-packed");
  int64_t targets = 0;
  for (int64_t b = 0; b < held.num_blocks(); ++b)
    for (int64_t t = 1; t < held.seq_len(); ++t) targets += held.labels(b)[t] != -100;
  ASSERT_GT(targets, 0);
  ASSERT_LT(targets, held.num_blocks() * 63);
  for (const bool aol : {true, false}) {
    std::vector<std::string> args = {"train", "--device", "cpu", "--preset", "tiny", "--tokenizer", demo, "--data",
                                     *dir_ + "/rows.jsonl", "--data-cache", *dir_ + "/cache", "--seq-len", "64",
                                     "--steps", "2", "--micro-batch", "2", "--eval-data", *dir_ + "/held.jsonl",
                                     "--packing", "wrapped"};
    if (aol) args.push_back("--assistant-only-loss");
    r = testing::run_anvil(args);
    ASSERT_EQ(r.exit_code, 0) << r.out;
    char want[96];
    std::snprintf(want, sizeof want, "(%lld blocks, %lld tokens", static_cast<long long>(held.num_blocks()),
                  static_cast<long long>(aol ? targets : held.num_blocks() * 63));
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  }
}

// --eval-max-blocks 2 of a 3-block set: the loss of the first 2 blocks (anvil grad on them),
// announced with the set's size.
TEST_F(Eval, MaxBlocksEvaluatesTheFirstBlocks) {
  SafetensorsFile three(*dir_ + "/eval3.safetensors");
  std::vector<int64_t> ids = read_as_i64(three.get("input_ids"));
  ids.resize(2 * 37);
  SafetensorsWriter w;
  w.add("input_ids", DType::kI64, {2, 37}, ids.data());
  w.write(*dir_ + "/eval3_first2.safetensors");
  const TrainRun capped = train("capped", 1, {"--eval-data", *dir_ + "/eval3.safetensors", "--eval-max-blocks", "2"});
  ASSERT_EQ(capped.exit_code, 0) << capped.out;
  ASSERT_EQ(capped.eval_losses.size(), 1u) << capped.out;
  EXPECT_EQ(static_cast<float>(capped.eval_losses.at(6)), grad_loss("capped", "eval3_first2"));
  EXPECT_NE(capped.out.find("step 6/6  evaluating 2 blocks of 3 (--eval-max-blocks)"), std::string::npos)
      << capped.out;
  EXPECT_NE(capped.out.find("(2 blocks, 72 tokens"), std::string::npos) << capped.out;
}

// The ETA counts the evaluations still to come, at the last one's pace, apart from the steps.
TEST(EvalSchedule, DueStepsAndTheEvaluationsLeft) {
  TrainConfig c;
  c.steps = 10;
  c.eval.every = 3;
  std::vector<int64_t> due;
  for (int64_t s = 1; s <= 10; ++s)
    if (eval_due(c, s)) due.push_back(s);
  EXPECT_EQ(due, (std::vector<int64_t>{3, 6, 9, 10}));
  EXPECT_EQ(evals_after(c, 0), 4);
  EXPECT_EQ(evals_after(c, 3), 3);
  EXPECT_EQ(evals_after(c, 8), 2);
  EXPECT_EQ(evals_after(c, 9), 1);
  EXPECT_EQ(evals_after(c, 10), 0);
  c.steps = 9;
  EXPECT_EQ(evals_after(c, 6), 1);
  c.eval.every = 0;
  EXPECT_EQ(evals_after(c, 1), 1);
  EXPECT_EQ(evals_after(c, 9), 0);
  c.eval.max_blocks = 5;
  EXPECT_EQ(eval_blocks(c.eval, 3), 3);
  EXPECT_EQ(eval_blocks(c.eval, 7), 5);
}

// A hub dataset given to --eval-data without --eval-split: its validation split (said in a
// resolved line), never the training split; without a held-out split, refused.
TEST_F(Eval, HubEvalDataTakesItsHeldOutSplit) {
  const std::string demo = std::string(ANVIL_SOURCE_DIR) + "/data/demo";
  std::ifstream in(demo + "/arithmetic.jsonl");
  std::string rows, held, line;
  for (int i = 0; i < 240 && std::getline(in, line); ++i) (i < 200 ? rows : held) += line + "\n";
  const std::string cache = *dir_ + "/hub";
  const std::string root = cache + "/datasets--org--sums";
  make_directories(root + "/refs");
  write_file_atomic(root + "/refs/main", "abc\n");
  make_directories(root + "/snapshots/abc/data");
  write_file_atomic(root + "/snapshots/abc/data/train-00000-of-00001.jsonl", rows);
  write_file_atomic(*dir_ + "/held.jsonl", held);
  auto prep = testing::run_anvil({"prepare", "--tokenizer", demo, "--data", *dir_ + "/held.jsonl", "--seq-len", "64",
                                  "--out", *dir_ + "/held-packed"});
  ASSERT_EQ(prep.exit_code, 0) << prep.out;
  const int64_t held_blocks = PackedDataset::open(*dir_ + "/held-packed").num_blocks();
  const std::string train = "HF_HUB_CACHE=" + testing::shell_quote(cache) + " " +
                            testing::shell_quote(testing::anvil_binary()) + " train --device cpu --preset tiny" +
                            " --tokenizer " + testing::shell_quote(demo) + " --data org/sums --eval-data org/sums" +
                            " --seq-len 64 --steps 1 --data-cache " + testing::shell_quote(*dir_ + "/hub-cache");
  auto r = testing::run_command(train);
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("anvil train: --eval-data org/sums has no validation or test split"), std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("--eval-split NAME"), std::string::npos) << r.out;
  write_file_atomic(root + "/snapshots/abc/data/validation-00000-of-00001.jsonl", held);
  r = testing::run_command(train);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("resolved eval split validation: the held-out split of org/sums"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(" + std::to_string(held_blocks) + " blocks,"), std::string::npos) << r.out;
}

// --keep-best with --keep-last 1: the newest checkpoint and the one of the lowest eval loss
// (best.json names it), whatever rotation deleted; the run's losses are a plain run's.
TEST_F(Eval, KeepBestKeepsTheLowestEvalLossCheckpoint) {
  const std::string ckpt = *dir_ + "/best-ckpt";
  const std::vector<std::string> every = {"--eval-data", *dir_ + "/eval2.safetensors", "--eval-every", "1",
                                          "--lr", "2e-2"};
  const TrainRun plain = train("best-plain", 1, every);
  std::vector<std::string> args = every;
  args.insert(args.end(), {"--save-every", "1", "--ckpt-dir", ckpt, "--keep-last", "1", "--keep-best"});
  const TrainRun best = train("best", 1, args);
  ASSERT_EQ(best.exit_code, 0) << best.out;
  EXPECT_EQ(best.eval_losses, plain.eval_losses);
  ASSERT_EQ(best.eval_losses.size(), 6u) << best.out;
  int64_t argmin = 1;
  for (const auto& [step, loss] : best.eval_losses)
    if (loss < best.eval_losses.at(argmin)) argmin = step;
  ASSERT_LT(argmin, 6) << "the eval loss must rise after its lowest point for rotation to matter";
  std::set<std::string> kept;
  for (const auto& e : std::filesystem::directory_iterator(ckpt))
    if (e.path().filename().string().rfind("step-", 0) == 0) kept.insert(e.path().filename().string());
  EXPECT_EQ(kept, (std::set<std::string>{"step-6", "step-" + std::to_string(argmin)})) << best.out;
  const Json record = json_read_file(ckpt + "/best.json");
  EXPECT_EQ(record["checkpoint"], "step-" + std::to_string(argmin));
  EXPECT_EQ(record["eval_loss"].get<double>(), best.eval_losses.at(argmin));
}

TEST_F(Eval, BadEvalSettingsAreUsageErrors) {
  auto r = testing::run_anvil({"train", "--device", "cpu", "--model", testing::shared_dir() + "/fixtures/tiny-qwen3",
                               "--data", *dir_ + "/train.safetensors", "--eval-every", "2"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("--eval-every needs --eval-data"), std::string::npos) << r.out;
  r = testing::run_anvil({"train", "--device", "cpu", "--model", testing::shared_dir() + "/fixtures/tiny-qwen3",
                          "--data", *dir_ + "/train.safetensors", "--eval-data", *dir_ + "/eval2.safetensors",
                          "--eval-split", "test"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("a split applies to hub dataset ids"), std::string::npos) << r.out;
  r = testing::run_anvil({"train", "--device", "cpu", "--model", testing::shared_dir() + "/fixtures/tiny-qwen3",
                          "--data", *dir_ + "/train.safetensors", "--eval-split", "test"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("anvil train: --eval-split needs --eval-data"), std::string::npos) << r.out;
  r = testing::run_anvil({"train", "--device", "cpu", "--model", testing::shared_dir() + "/fixtures/tiny-qwen3",
                          "--data", *dir_ + "/train.safetensors", "--save-every", "2", "--ckpt-dir",
                          *dir_ + "/no-best", "--keep-best"});
  EXPECT_EQ(r.exit_code, 2) << r.out;
  EXPECT_NE(r.out.find("anvil train: --keep-best needs --save-every N and --eval-data"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace anvil
