// The anvil binary: the command table, the help of the shared flags, flag errors (exit code 2, one
// line), init, grad's output against the golden fixture, train on the CPU against the golden
// curve, hub ids.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "core/fs.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "testing.h"

namespace anvil {
namespace {

using testing::run_anvil;

int count_lines(const std::string& s) {
  int n = 0;
  for (char c : s) n += c == '\n';
  return n;
}

TEST(Cli, HelpAndCommandTable) {
  auto r = run_anvil({"--help"});
  EXPECT_EQ(r.exit_code, 0);
  for (const char* c : {"train", "grad", "init"}) EXPECT_NE(r.out.find(c), std::string::npos) << c;
  for (const char* c : {"train", "grad", "init"}) {
    auto h = run_anvil({c, "--help"});
    EXPECT_EQ(h.exit_code, 0) << c;
    EXPECT_NE(h.out.find("usage: anvil " + std::string(c)), std::string::npos) << h.out;
  }
}

// A --help text's flags, each with its lines (the names line and the wrapped help under it),
// by the flag's first name.
std::map<std::string, std::string> flags_of(const std::string& help) {
  std::map<std::string, std::string> flags;
  std::istringstream lines(help.substr(help.find("\nflags:\n")));
  std::string line, name;
  while (std::getline(lines, line)) {
    if (line.rfind("  -", 0) == 0) name = line.substr(2, line.find_first_of(", ", 2) - 2);
    else if (line.rfind("      ", 0) != 0) name.clear();
    if (!name.empty()) flags[name] += line + "\n";
  }
  return flags;
}

// anvil train, plan and bench step --help wrap at 100 columns, and a flag two of them take
// reads the same in each, its default too: one binder declares it (cli/config_flags.h). Not
// --warmup, which names a different setting in each: the learning rate's warm-up (train), the
// untimed steps (bench step).
TEST(Cli, SharedFlagsReadTheSameInEveryHelp) {
  std::map<std::string, std::map<std::string, std::string>> flags;
  for (const std::vector<std::string>& command : std::vector<std::vector<std::string>>{
           {"train", "--help"}, {"plan", "--help"}, {"bench", "step", "--help"}}) {
    const auto r = run_anvil(command);
    ASSERT_EQ(r.exit_code, 0) << command[0] << ": " << r.out;
    std::istringstream lines(r.out);
    std::string line;
    while (std::getline(lines, line)) EXPECT_LE(line.size(), 100u) << command[0] << ": " << line;
    flags[command[0] + (command.size() > 2 ? " " + command[1] : "")] = flags_of(r.out);
  }
  for (const char* shared : {"--model", "--preset", "--seq-len", "--micro-batch", "--grad-accum", "--mode",
                             "--reduce-dtype", "--grad-dtype", "--fsdp-defer-sync", "--context-parallel",
                             "--recompute", "--mlp-tile", "--fp8", "--offload-activations",
                             "--no-overlap-optimizer"})
    for (const auto& [command, of] : flags) EXPECT_TRUE(of.count(shared)) << command << " has no " << shared;
  int compared = 0;
  for (const auto& [a, of_a] : flags)
    for (const auto& [b, of_b] : flags) {
      if (a >= b) continue;
      for (const auto& [flag, lines] : of_a) {
        if (!of_b.count(flag) || flag == "--warmup") continue;
        EXPECT_EQ(lines, of_b.at(flag)) << flag << " reads otherwise in " << a << " and " << b;
        ++compared;
      }
    }
  EXPECT_GE(compared, 3 * 15) << "the shared sections' flags, in each pair of commands";
  EXPECT_NE(flags["train"]["--recompute"].find("[default: auto]"), std::string::npos) << flags["train"]["--recompute"];
}

TEST(Cli, UsageErrorsAreOneLineAndExitTwo) {
  const std::vector<std::vector<std::string>> bad = {
      {"frobnicate"},
      {"grad", "--bogus"},
      {"grad", "--model"},
      {"grad", "--tokens", "x"},
      {"train", "--data", "x", "--steps", "ten"},
      {"train", "--data", "x", "--mode", "zero3"},
      {"train", "--data", "x", "--reduce-dtype", "fp16"},
      {"train", "--data", "x", "--nproc-per-node", "2", "--nnodes", "2"},
      {"train", "--data", "x", "--nproc-per-node", "2", "--nnodes", "2", "--node-rank", "2", "--master-port", "1"},
      {"init", "--out", "d", "--seed", "1.5"},
  };
  for (auto& args : bad) {
    auto r = run_anvil(args);
    EXPECT_EQ(r.exit_code, 2) << args[0] << ": " << r.out;
    EXPECT_EQ(count_lines(r.out), 1) << r.out;
  }
  auto r = run_anvil({"train", "--data", "x", "--mode", "zero3"});
  EXPECT_NE(r.out.find("--mode must be one of auto|ddp|zero2|fsdp"), std::string::npos) << r.out;
}

TEST(Cli, InitPresetAndConfig) {
  const std::string dir = testing::temp_dir("init");
  auto r = run_anvil({"init", "--config", testing::shared_dir() + "/fixtures/tiny-qwen3/config.json", "--out",
                      dir + "/m", "--seed", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  ModelConfig c = load_config(dir + "/m");
  EXPECT_EQ(c.hidden_size, 64);
  SafetensorsFile f(dir + "/m/model.safetensors");
  EXPECT_EQ(f.find("lm_head.weight"), nullptr) << "tied: written once";
  auto w = read_as_f64(f.get("model.layers.0.mlp.up_proj.weight"));
  double mean = 0, sq = 0;
  for (double x : w) mean += x, sq += x * x;
  mean /= static_cast<double>(w.size());
  const double sd = std::sqrt(sq / static_cast<double>(w.size()) - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(sd, 0.02, 0.001) << "normal(0, initializer_range)";
  for (double x : read_as_f64(f.get("model.norm.weight"))) EXPECT_EQ(x, 1.0);
  // Same seed, same bytes; another seed, other weights.
  ASSERT_EQ(run_anvil({"init", "--config", dir + "/m/config.json", "--out", dir + "/m2", "--seed", "3"}).exit_code, 0);
  ASSERT_EQ(run_anvil({"init", "--config", dir + "/m/config.json", "--out", dir + "/m3", "--seed", "4"}).exit_code, 0);
  EXPECT_EQ(read_file(dir + "/m/model.safetensors"), read_file(dir + "/m2/model.safetensors"));
  EXPECT_NE(read_file(dir + "/m/model.safetensors"), read_file(dir + "/m3/model.safetensors"));
  auto p = run_anvil({"init", "--preset", "qwen3-0.6b-typo", "--out", dir + "/x"});
  EXPECT_EQ(p.exit_code, 2) << p.out;
  EXPECT_NE(p.out.find("qwen3-1.7b"), std::string::npos) << "lists the presets: " << p.out;
}

TEST(Cli, GradMatchesGoldenFixture) {
  const std::string fx = testing::shared_dir() + "/fixtures/tiny-qwen3-untied";
  const std::string out = testing::temp_dir("grad") + "/g.safetensors";
  auto r = run_anvil({"grad", "--device", "cpu", "--model", fx, "--tokens", fx + "/golden_step0.safetensors", "--out",
                      out});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  SafetensorsFile got(out), want(fx + "/golden_step0.safetensors");
  EXPECT_EQ(got.get("loss").dtype, DType::kF32);
  EXPECT_EQ(got.get("logits").shape, Shape({2, 37, 1000}));
  EXPECT_NEAR(read_as_f64(got.get("loss"))[0], read_as_f64(want.get("loss"))[0], 1e-6 * 7);
  EXPECT_TRUE(testing::close_rel_l2(read_as_f64(got.get("logits")), read_as_f64(want.get("logits")), 1e-5));
  int grads = 0;
  for (auto& t : want.tensors()) {
    if (t.name.rfind("grad.", 0) != 0) continue;
    ++grads;
    const SafeTensorInfo* g = got.find(t.name);
    ASSERT_NE(g, nullptr) << t.name;
    EXPECT_EQ(g->shape, t.shape) << t.name;
    EXPECT_TRUE(testing::close_rel_l2(read_as_f64(*g), read_as_f64(t), 1e-4)) << t.name;
  }
  EXPECT_EQ(grads + 2, static_cast<int>(got.tensors().size())) << "loss, logits and one gradient per parameter";
}

TEST(Cli, BadInputsNameTheFile) {
  const std::string dir = testing::temp_dir("bad");
  write_file_atomic(dir + "/trunc.safetensors", std::string("\x40\x00\x00\x00\x00\x00\x00\x00{", 9));
  auto r = run_anvil({"grad", "--model", testing::shared_dir() + "/fixtures/tiny-qwen3", "--tokens",
                      dir + "/trunc.safetensors", "--out", dir + "/o.safetensors"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("trunc.safetensors"), std::string::npos) << r.out;
  auto m = run_anvil({"grad", "--model", "nobody/no-such-model", "--tokens", "x", "--out", "y"});
  EXPECT_EQ(m.exit_code, 2);
  EXPECT_NE(m.out.find("local Hugging Face cache"), std::string::npos) << m.out;
}

TEST(Cli, HubIdResolvesFromTheLocalCache) {
  const std::string cache = testing::temp_dir("hub");
  const std::string snap = cache + "/models--acme--tiny/snapshots/abc123";
  make_directories(snap);
  make_directories(cache + "/models--acme--tiny/refs");
  write_file_atomic(cache + "/models--acme--tiny/refs/main", "abc123");
  const std::string fx = testing::shared_dir() + "/fixtures/tiny-qwen3";
  for (const char* f : {"config.json", "model.safetensors"})
    write_file_atomic(snap + "/" + f, read_file(fx + "/" + f));
  const std::string out = cache + "/g.safetensors";
  auto r = testing::run_command("HF_HUB_CACHE='" + cache + "' '" + testing::anvil_binary() + "' grad --model acme/tiny --tokens '" +
                                fx + "/golden_step0.safetensors' --out '" + out + "'");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  EXPECT_TRUE(path_exists(out));
}

TEST(Cli, TrainFollowsTheGoldenCurve) {
  // The fixture's 8 batches as a data file, read in order: the loss of every step must be the
  // fp64 curve's within 1e-5.
  const std::string fx = testing::shared_dir() + "/fixtures/tiny-qwen3";
  SafetensorsFile gold(fx + "/golden_adamw.safetensors");
  std::vector<int64_t> ids;
  for (int i = 0; i < 8; ++i) {
    auto b = read_as_i64(gold.get("batch" + std::to_string(i)));
    ids.insert(ids.end(), b.begin(), b.end());
  }
  const std::string dir = testing::temp_dir("train");
  SafetensorsWriter w;
  w.add("input_ids", DType::kI64, {16, 37}, ids.data());
  w.write(dir + "/blocks.safetensors");
  auto r = run_anvil({"train", "--device", "cpu", "--model", fx, "--data", dir + "/blocks.safetensors", "--no-shuffle",
                      "--steps", "8", "--micro-batch", "2", "--lr", "1e-3", "--log-every", "1", "--metrics",
                      dir + "/m.jsonl", "--export", dir + "/out"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  Json curve = json_read_file(fx + "/golden_curve.json");
  std::ifstream m(dir + "/m.jsonl");
  std::string line;
  int step = 0;
  std::getline(m, line);
  EXPECT_TRUE(json_parse(line, "metrics").contains("run_id")) << "the run's header first: " << line;
  while (std::getline(m, line)) {
    Json j = json_parse(line, "metrics");
    const double want = curve["fp64"][step]["loss"].get<double>();
    EXPECT_EQ(j["step"].get<int>(), step + 1);
    EXPECT_NEAR(j["loss"].get<double>(), want, 1e-5 * want) << "step " << step + 1;
    ++step;
  }
  EXPECT_EQ(step, 8);
  SafetensorsFile exported(dir + "/out/model.safetensors");
  EXPECT_EQ(exported.get("model.embed_tokens.weight").dtype, DType::kBF16);
  EXPECT_TRUE(path_exists(dir + "/out/config.json"));
  // The recomputation and accumulation paths give the same curve (4 micro-batches of 1... of the same 2 sequences).
  auto r2 = run_anvil({"train", "--device", "cpu", "--model", fx, "--data", dir + "/blocks.safetensors", "--no-shuffle",
                       "--steps", "8", "--micro-batch", "1", "--grad-accum", "2", "--recompute", "full", "--lr",
                       "1e-3", "--log-every", "1", "--metrics", dir + "/m2.jsonl"});
  ASSERT_EQ(r2.exit_code, 0) << r2.out;
  std::ifstream m2(dir + "/m2.jsonl");
  step = 0;
  std::getline(m2, line);  // the run's header
  while (std::getline(m2, line)) {
    Json j = json_parse(line, "metrics");
    const double want = curve["fp64"][step]["loss"].get<double>();
    EXPECT_NEAR(j["loss"].get<double>(), want, 1e-5 * want) << "accumulated step " << step + 1;
    ++step;
  }
  EXPECT_EQ(step, 8);
}

}  // namespace
}  // namespace anvil
