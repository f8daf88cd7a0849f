// --config FILE.toml (cli/args.h): every flag as a key (dashes or underscores), the command
// line winning, unknown keys named with the nearest flag, type errors naming the key and
// the file; to_toml() reads back to the same values. Through the binary: the resolved
// settings in each checkpoint and the export (anvil_config.toml), a run from that file
// repeating the run, and a resume with another learning rate saying so.
#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "cli/args.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "io/safetensors.h"
#include "testing.h"

namespace anvil {
namespace {

struct Settings {
  std::string data = "a.jsonl", mode = "ddp";
  int64_t seq_len = 0, micro_batch = 1;
  double lr = 1e-5;
  bool no_shuffle = false;
  std::vector<std::string> files;
};

// Parses `argv` (after the subcommand) into a fresh Settings.
Settings parse(const std::vector<std::string>& args, std::string* toml = nullptr) {
  Settings s;
  Args a("train", "test");
  a.config("--config")
      .opt("--data", &s.data, "FILE", "data")
      .opt("--seq-len", &s.seq_len, "T", "tokens")
      .opt("--micro-batch,--batch", &s.micro_batch, "B", "sequences")
      .opt("--lr", &s.lr, "LR", "rate")
      .choice("--mode", &s.mode, {"ddp", "fsdp"}, "mode")
      .flag("--no-shuffle", &s.no_shuffle, "order")
      .list("--files", &s.files, "F", "files");
  std::vector<std::string> copy = args;
  std::vector<char*> argv;
  for (auto& x : copy) argv.push_back(x.data());
  EXPECT_TRUE(a.parse(static_cast<int>(argv.size()), argv.data()));
  if (toml) *toml = a.to_toml();
  return s;
}

std::string write(const std::string& dir, const std::string& name, const std::string& text) {
  const std::string p = dir + "/" + name;
  std::ofstream(p) << text;
  return p;
}

std::string usage_error(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kUsage);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(Config, KeysAreFlagsWithoutDashes) {
  const std::string dir = testing::temp_dir("config");
  const std::string f = write(dir, "a.toml",
                              "data = \"chats.jsonl\"\nseq_len = 2048\nbatch = 4\nlr = 2e-5\nmode = \"fsdp\"\n"
                              "no-shuffle = true\nfiles = [\"x\", \"y\"]\n");
  const Settings s = parse({"--config", f});
  EXPECT_EQ(s.data, "chats.jsonl");
  EXPECT_EQ(s.seq_len, 2048);
  EXPECT_EQ(s.micro_batch, 4);  // an alias is a key too
  EXPECT_EQ(s.lr, 2e-5);
  EXPECT_EQ(s.mode, "fsdp");
  EXPECT_TRUE(s.no_shuffle);
  EXPECT_EQ(s.files, (std::vector<std::string>{"x", "y"}));
  // The command line wins, wherever --config stands.
  const Settings t = parse({"--seq-len", "512", "--config", f, "--lr=3e-4"});
  EXPECT_EQ(t.seq_len, 512);
  EXPECT_EQ(t.lr, 3e-4);
  EXPECT_EQ(t.data, "chats.jsonl");
}

TEST(Config, UnknownKeysAndBadValuesAreNamed) {
  const std::string dir = testing::temp_dir("config");
  std::string e = usage_error({"--config", write(dir, "b.toml", "seq_lenn = 2048\n")});
  EXPECT_NE(e.find("unknown key 'seq_lenn'"), std::string::npos) << e;
  EXPECT_NE(e.find("nearest flag: --seq-len"), std::string::npos) << e;
  e = usage_error({"--config", write(dir, "c.toml", "seq-len = \"long\"\n")});
  EXPECT_NE(e.find("--seq-len expects an integer, got 'long'"), std::string::npos) << e;
  EXPECT_NE(e.find("key 'seq-len' of " + dir + "/c.toml"), std::string::npos) << e;
  e = usage_error({"--config", write(dir, "d.toml", "mode = \"zero3\"\n")});
  EXPECT_NE(e.find("--mode must be one of ddp|fsdp"), std::string::npos) << e;
  e = usage_error({"--config", write(dir, "e.toml", "no-shuffle = 1\n")});
  EXPECT_NE(e.find("--no-shuffle is a switch"), std::string::npos) << e;
  e = usage_error({"--config", write(dir, "f.toml", "lr = [1, 2]\n")});
  EXPECT_NE(e.find("--lr expects LR, got a TOML table or array"), std::string::npos) << e;
  e = usage_error({"--config", write(dir, "g.toml", "lr = = 1\n")});
  EXPECT_NE(e.find(dir + "/g.toml:1:"), std::string::npos) << e;
  e = usage_error({"--config", dir + "/missing.toml"});
  EXPECT_NE(e.find("missing.toml"), std::string::npos) << e;
  e = usage_error({"--config", write(dir, "h.toml", "config = \"a.toml\"\n")});
  EXPECT_NE(e.find("unknown key 'config'"), std::string::npos) << e;
}

TEST(Config, ResolvedSettingsReadBackTheSame) {
  const std::string dir = testing::temp_dir("config");
  std::string toml;
  const Settings s = parse({"--data", "we\"ird\\name.jsonl", "--lr", "0.1", "--seq-len", "37", "--no-shuffle",
                            "--files", "p", "q", "--mode", "fsdp"},
                           &toml);
  EXPECT_NE(toml.find("seq-len = 37\n"), std::string::npos) << toml;
  EXPECT_NE(toml.find("micro-batch = 1\n"), std::string::npos) << toml;
  EXPECT_NE(toml.find("lr = 0.1\n"), std::string::npos) << toml;
  EXPECT_EQ(toml.find("config"), std::string::npos) << toml;
  std::string again;
  const Settings r = parse({"--config", write(dir, "r.toml", toml)}, &again);
  EXPECT_EQ(again, toml);
  EXPECT_EQ(r.data, s.data);
  EXPECT_EQ(r.lr, s.lr);
  EXPECT_EQ(r.files, s.files);
  EXPECT_TRUE(r.no_shuffle);
}

std::map<int64_t, double> losses_of(const std::string& metrics) {
  std::map<int64_t, double> out;
  std::ifstream in(metrics);
  std::string line;
  while (std::getline(in, line)) {
    const Json j = json_parse(line, metrics);
    if (j.contains("step")) out[j["step"].get<int64_t>()] = j["loss"].get<double>();  // not the run's header
  }
  return out;
}

TEST(Config, WrittenIntoCheckpointsAndExportAndReadBack) {
  const std::string dir = testing::temp_dir("config-run");
  std::vector<int64_t> ids(8 * 37);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7919) % 1000);
  SafetensorsWriter w;
  w.add("input_ids", DType::kI64, {8, 37}, ids.data());
  w.write(dir + "/blocks.safetensors");
  const std::string cfg = write(dir, "run.toml",
                                "device = \"cpu\"\nmodel = \"" + testing::shared_dir() +
                                    "/fixtures/tiny-qwen3\"\ndata = \"" + dir +
                                    "/blocks.safetensors\"\nsteps = 4\nmicro_batch = 2\nlr = 1e-3\n"
                                    "log-every = 1\nsave-every = 2\nckpt-dir = \"" + dir + "/ckpt\"\n");
  auto r = testing::run_anvil({"train", "--config", cfg, "--metrics", dir + "/a.jsonl", "--export", dir + "/out"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const std::string& p : {dir + "/ckpt/step-2", dir + "/ckpt/step-4", dir + "/out"}) {
    ASSERT_TRUE(path_exists(p + "/anvil_config.toml")) << p;
    const std::string t = read_file(p + "/anvil_config.toml");
    EXPECT_NE(t.find("steps = 4\n"), std::string::npos) << t;
    EXPECT_NE(t.find("lr = 0.001\n"), std::string::npos) << t;
    EXPECT_NE(t.find("export = \"" + dir + "/out\"\n"), std::string::npos) << t;
  }
  // The written file alone repeats the run (with another metrics file and no checkpoints).
  auto again = testing::run_anvil({"train", "--config", dir + "/out/anvil_config.toml", "--metrics",
                                   dir + "/b.jsonl", "--ckpt-dir", dir + "/ckpt-b", "--export", dir + "/out-b"});
  ASSERT_EQ(again.exit_code, 0) << again.out;
  EXPECT_EQ(losses_of(dir + "/b.jsonl"), losses_of(dir + "/a.jsonl"));
  EXPECT_EQ(again.out.find("other settings"), std::string::npos) << again.out;
  // A resume with another learning rate says which setting changed (more steps on a
  // constant schedule change nothing that was trained).
  auto resumed = testing::run_anvil({"train", "--config", cfg, "--steps", "6", "--lr", "2e-3",
                                     "--resume", dir + "/ckpt/step-4"});
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out;
  EXPECT_NE(resumed.out.find("other settings (lr 0.001 -> 0.002)"), std::string::npos) << resumed.out;
  EXPECT_NE(resumed.out.find("does not continue as an uninterrupted one would"), std::string::npos) << resumed.out;
}

// The written settings are the resolved ones: no auto left, the device named, and the files
// and folders absolute, though the run was started with relative paths in another folder.
TEST(Config, WrittenSettingsAreResolvedAndAbsolute) {
  const std::string dir = testing::temp_dir("config-resolved");
  testing::write_random_blocks(dir + "/blocks.safetensors", 8, 37, 3);
  const std::string model = testing::shared_dir() + "/fixtures/tiny-qwen3";
  const testing::RunResult r = testing::run_command(
      "cd " + testing::shell_quote(dir) + " && " + testing::shell_quote(testing::anvil_binary()) +
      " train --model " + testing::shell_quote(model) +
      " --data blocks.safetensors --steps 2 --micro-batch 2 --ckpt-dir ckpt --export out --metrics m.jsonl"
      " </dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::string t = read_file(dir + "/out/anvil_config.toml");
  for (const std::string& line :
       {std::string("mode = \"ddp\"\n"), std::string("device = \"cpu\"\n"), std::string("recompute = \"none\"\n"),
        "data = \"" + dir + "/blocks.safetensors\"\n", "ckpt-dir = \"" + dir + "/ckpt\"\n",
        "export = \"" + dir + "/out\"\n", "metrics = \"" + dir + "/m.jsonl\"\n"})
    EXPECT_NE(t.find(line), std::string::npos) << line << "in:\n" << t;
  EXPECT_EQ(t.find("\"auto\""), std::string::npos) << t;
}

}  // namespace
}  // namespace anvil
