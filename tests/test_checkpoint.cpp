// Checkpoints on CPU ranks (the tiny fixture model, 24 blocks: 8 steps of 4 sequences cross
// an epoch at step 6):
//  - saving does not change the run, and resuming at step 4 of 8 with the same 2 ranks
//    gives the same bits for steps 5 to 8 and the same final weights;
//  - resuming with 1 and with 4 ranks, in fsdp, and a fsdp checkpoint in ddp, matches
//    within 1e-5 relative (resharded at load); so does a chain of resumes through every
//    mode and rank count, zero2 on 4 -> fsdp on 2 -> ddp on 1 -> zero2 on 2;
//  - a rank that dies halfway through a save leaves the previous checkpoint, which the
//    same command resumes from;
//  - the newest checkpoint of --ckpt-dir with a truncated shard or a flipped byte is skipped
//    with a warning naming it and why, the next older one resumed (from the start on both
//    ranks: the same bits as an uninterrupted run) and the bad one set aside as
//    step-N.corrupt, which --keep-last neither counts nor deletes; so is one whose meta.json
//    does not parse, the run still continuing its metrics file;
//  - given to --resume, a truncated shard, a flipped byte and another model are refused
//    naming the file and the older complete checkpoint;
//  - export: fp32 equals the end-of-training export bit for bit, bf16 is its rounding,
//    sharding with an index, tied weights once, --full carries the optimizer state;
//  - XXH64 against xxhsum -H1; a corrupt shard found by the checksum of its chunk, or of the
//    whole file in a checkpoint that records no chunks';
//  - the settings a checkpoint records are the ones a resume compares, less the split of the
//    global batch.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "core/bf16.h"
#include "core/fs.h"
#include "core/json.h"
#include "io/checkpoint_files.h"
#include "io/parallel_file.h"
#include "io/safetensors.h"
#include "testing.h"
#include "train/config.h"
#include "metrics_losses.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

struct TrainRun {
  int exit_code = -1;
  std::string out;
  std::map<int64_t, double> losses;  // by step
  std::map<std::string, std::vector<double>> params;
};

std::map<std::string, std::vector<double>> read_params(const std::string& file) {
  std::map<std::string, std::vector<double>> p;
  SafetensorsFile f(file);
  for (auto& t : f.tensors()) p[t.name] = read_as_f64(t);
  return p;
}

class Checkpoint : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(testing::temp_dir("checkpoint"));
    testing::write_random_blocks(*dir_ + "/blocks.safetensors", 24, 37, 11);
  }

  // 8 steps of 4 sequences; micro-batch 4 / nproc. `extra`: more flags; `env`: a prefix.
  static TrainRun train(const std::string& tag, const std::string& mode, int nproc, const std::vector<std::string>& extra,
                   const std::string& env = "", const std::string& model = "tiny-qwen3") {
    const std::string out = *dir_ + "/" + tag;
    std::vector<std::string> args = {"train", "--device", "cpu", "--model", testing::shared_dir() + "/fixtures/" + model,
                                     "--data", *dir_ + "/blocks.safetensors", "--mode", mode, "--steps", "8",
                                     "--micro-batch", std::to_string(4 / nproc), "--lr", "1e-3", "--warmup", "2",
                                     "--schedule", "cosine", "--log-every", "1", "--metrics", out + ".jsonl",
                                     "--export", out, "--export-dtype", "fp32"};
    if (nproc > 1) args.insert(args.end(), {"--nproc-per-node", std::to_string(nproc)});
    args.insert(args.end(), extra.begin(), extra.end());
    std::string cmd = env + " '" + testing::anvil_binary() + "'";
    for (auto& a : args) cmd += " '" + a + "'";
    const testing::RunResult r = testing::run_command(cmd + " </dev/null");
    TrainRun run;
    run.exit_code = r.exit_code;
    run.out = r.out;
    run.losses = testing::read_metrics_losses(out + ".jsonl").loss;
    if (r.exit_code == 0) run.params = read_params(out + "/model.safetensors");
    return run;
  }

  // The uninterrupted run (2 ranks, ddp), and the same run saving every 4 steps into ckpt().
  static const TrainRun& base() {
    static const TrainRun r = train("base", "ddp", 2, {});
    return r;
  }
  static const TrainRun& saving() {
    static const TrainRun r = train("saving", "ddp", 2, {"--save-every", "4", "--ckpt-dir", ckpt()});
    return r;
  }
  static std::string ckpt() { return *dir_ + "/ckpt"; }

  static void expect_bits(const TrainRun& got, const TrainRun& want, int64_t from, const std::string& what) {
    ASSERT_EQ(got.exit_code, 0) << what << ": " << got.out;
    for (int64_t s = from; s <= 8; ++s) {
      ASSERT_TRUE(got.losses.count(s)) << what << " step " << s;
      EXPECT_EQ(got.losses.at(s), want.losses.at(s)) << what << " step " << s;
    }
    EXPECT_EQ(got.params, want.params) << what;
  }

  static void expect_close(const TrainRun& got, const TrainRun& want, int64_t from, const std::string& what) {
    ASSERT_EQ(got.exit_code, 0) << what << ": " << got.out;
    for (int64_t s = from; s <= 8; ++s) {
      ASSERT_TRUE(got.losses.count(s)) << what << " step " << s;
      EXPECT_NEAR(got.losses.at(s), want.losses.at(s), 1e-5 * want.losses.at(s)) << what << " step " << s;
    }
    EXPECT_FALSE(got.losses.count(from - 1)) << what << ": steps before the checkpoint ran again";
    ASSERT_EQ(got.params.size(), want.params.size()) << what;
    for (auto& [name, w] : want.params) EXPECT_TRUE(testing::close_rel_l2(got.params.at(name), w, 1e-5)) << what << " " << name;
  }

  static std::string copy_checkpoints(const std::string& tag) {
    const std::string to = *dir_ + "/" + tag;
    fs::copy(ckpt(), to, fs::copy_options::recursive);
    return to;
  }

  static std::string* dir_;
};
std::string* Checkpoint::dir_ = nullptr;

TEST_F(Checkpoint, SameRanksResumeIsBitIdentical) {
  const TrainRun& b = base();
  ASSERT_EQ(b.exit_code, 0) << b.out;
  ASSERT_EQ(b.losses.size(), 8u);
  // Saving leaves the run as it was.
  expect_bits(saving(), b, 1, "saving run");
  EXPECT_NE(saving().out.find("GB/s"), std::string::npos) << saving().out;
  for (const char* c : {"step-4", "step-8"}) EXPECT_TRUE(validate_checkpoint(ckpt() + "/" + c).ok()) << c;
  const Json meta = read_checkpoint_meta(ckpt() + "/step-4");
  EXPECT_EQ(meta["step"], 4);
  EXPECT_EQ(meta["world"], 2);
  EXPECT_EQ(meta["mode"], "ddp");
  EXPECT_EQ(meta["shards"].size(), 2u);
  EXPECT_EQ(meta["data"]["epoch"], 0);
  EXPECT_EQ(meta["data"]["samples_in_epoch"], 16);
  EXPECT_EQ(read_checkpoint_meta(ckpt() + "/step-8")["data"]["epoch"], 1);

  const TrainRun r = train("resume_same", "ddp", 2, {"--resume", ckpt() + "/step-4"});
  expect_bits(r, b, 5, "2 ranks from step 4");
  EXPECT_EQ(r.losses.count(4), 0u) << "steps 1..4 are not trained again";
  EXPECT_NE(r.out.find("resumed from"), std::string::npos) << r.out;
}

TEST_F(Checkpoint, OtherRanksAndModesAreReshardedAtLoad) {
  ASSERT_EQ(saving().exit_code, 0) << saving().out;
  const std::string from = ckpt() + "/step-4";
  expect_close(train("resume_n1", "ddp", 1, {"--resume", from}), base(), 5, "1 rank");
  expect_close(train("resume_n4", "ddp", 4, {"--resume", from}), base(), 5, "4 ranks");
  expect_close(train("resume_fsdp2", "fsdp", 2, {"--resume", from}), base(), 5, "fsdp 2 ranks");
  expect_close(train("resume_fsdp4", "fsdp", 4, {"--resume", from}), base(), 5, "fsdp 4 ranks");

  // A sharded (fsdp) checkpoint into ddp; --keep-last leaves the newest three.
  const std::string fsdp_dir = *dir_ + "/ckpt_fsdp";
  const TrainRun fsdp = train("saving_fsdp", "fsdp", 2, {"--save-every", "2", "--keep-last", "3", "--ckpt-dir", fsdp_dir});
  ASSERT_EQ(fsdp.exit_code, 0) << fsdp.out;
  EXPECT_EQ(list_checkpoints(fsdp_dir),
            (std::vector<std::string>{fsdp_dir + "/step-8", fsdp_dir + "/step-6", fsdp_dir + "/step-4"}));
  expect_close(train("resume_fsdp_in_ddp", "ddp", 1, {"--resume", fsdp_dir + "/step-4"}), base(), 5, "fsdp -> ddp");
}

// Each run of the chain resumes the one before at its first checkpoint after the step it
// resumed from, and saves every 2 steps: zero2 x4 saves step 2, fsdp x2 resumes it and saves
// step 4, ddp x1 resumes that and saves step 6, zero2 x2 resumes that. Every run's steps
// and final weights are the uninterrupted run's.
TEST_F(Checkpoint, ResumesChainThroughEveryModeAndRankCount) {
  struct Link {
    const char* mode;
    int nproc;
  };
  const Link chain[] = {{"zero2", 4}, {"fsdp", 2}, {"ddp", 1}, {"zero2", 2}};
  std::string from;
  for (int i = 0; i < 4; ++i) {
    const std::string tag = cat("chain", i, "_", chain[i].mode, chain[i].nproc), dir = *dir_ + "/" + tag + "_ckpt";
    std::vector<std::string> extra = {"--save-every", "2", "--ckpt-dir", dir};
    if (i > 0) extra.insert(extra.end(), {"--resume", from});
    expect_close(train(tag, chain[i].mode, chain[i].nproc, extra), base(), 2 * i + 1, tag);
    from = cat(dir, "/step-", 2 * i + 2);
    const Json meta = read_checkpoint_meta(from);
    EXPECT_EQ(meta["mode"], chain[i].mode) << from;
    EXPECT_EQ(meta["world"], chain[i].nproc) << from;
  }
}

TEST_F(Checkpoint, RankDyingMidSaveLeavesThePreviousCheckpoint) {
  const std::string dir = *dir_ + "/ckpt_die";
  const std::vector<std::string> flags = {"--save-every", "4", "--ckpt-dir", dir};
  const TrainRun died = train("die", "ddp", 2, flags, "ANVIL_FAULT=die_in_save:8");
  EXPECT_NE(died.exit_code, 0) << died.out;
  EXPECT_NE(died.out.find("halfway"), std::string::npos) << died.out;
  EXPECT_TRUE(fs::exists(dir + "/.tmp-step-8")) << "the save was under way";
  EXPECT_FALSE(fs::exists(dir + "/step-8")) << "an incomplete checkpoint must not look complete";
  EXPECT_EQ(list_checkpoints(dir), std::vector<std::string>{dir + "/step-4"});
  EXPECT_TRUE(validate_checkpoint(dir + "/step-4").ok());

  // The same command again: resumes from step 4 and ends where the uninterrupted run does.
  const TrainRun again = train("die_again", "ddp", 2, flags);
  EXPECT_NE(again.out.find("resumed from " + dir + "/step-4"), std::string::npos) << again.out;
  expect_bits(again, base(), 5, "resumed after the crash");
  EXPECT_FALSE(fs::exists(dir + "/.tmp-step-8")) << "the leftover is cleaned when the next run starts";
  EXPECT_TRUE(validate_checkpoint(dir + "/step-8").ok());
}

TEST_F(Checkpoint, CorruptNewestCheckpointIsSkippedForTheNextOlder) {
  ASSERT_EQ(saving().exit_code, 0) << saving().out;
  {  // a truncated shard: found by its size, before the Trainer is built
    const std::string dir = copy_checkpoints("ckpt_trunc");
    const std::string shard = dir + "/step-8/rank-00001.safetensors";
    fs::resize_file(shard, fs::file_size(shard) - 100);
    const TrainRun r = train("trunc", "ddp", 2, {"--ckpt-dir", dir});
    EXPECT_NE(r.out.find("checkpoint " + dir + "/step-8 failed its checks: " + shard + ": "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("(truncated); resuming from the next older one, " + dir + "/step-4"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("resumed from " + dir + "/step-4 at step 4"), std::string::npos) << r.out;
    expect_bits(r, base(), 5, "resumed from step 4 past a truncated step 8");
    // The run's last step saved step 8 again, beside the bad one.
    EXPECT_EQ(list_checkpoints(dir), (std::vector<std::string>{dir + "/step-8", dir + "/step-4"}));
    EXPECT_TRUE(validate_checkpoint(dir + "/step-8").ok());
    EXPECT_NE(r.out.find("the failed checkpoint " + dir + "/step-8 is set aside as " + dir + "/step-8.corrupt"),
              std::string::npos) << r.out;
    EXPECT_EQ(fs::file_size(dir + "/step-8.corrupt/rank-00001.safetensors"), fs::file_size(ckpt() + "/step-8/rank-00001.safetensors") - 100);
  }
  {  // a flipped byte in rank 1's masters: found by its checksum once both ranks have built
     // their Trainer from it, which is then built again from step 4
    const std::string dir = copy_checkpoints("ckpt_flip_auto");
    const std::string shard = dir + "/step-8/rank-00001.safetensors";
    std::string bytes = read_file(shard);
    bytes[bytes.size() / 6] ^= 0x10;
    write_file_atomic(shard, bytes);
    // Saving again (step 8 among them) with --keep-last 1: the bad one is neither counted
    // nor deleted.
    const TrainRun r = train("flip_auto", "ddp", 2, {"--ckpt-dir", dir, "--save-every", "4", "--keep-last", "1"});
    EXPECT_NE(r.out.find("checkpoint " + dir + "/step-8 failed its checks: " + shard + ": checksum "), std::string::npos)
        << r.out;
    EXPECT_NE(r.out.find("resuming from the next older one, " + dir + "/step-4"), std::string::npos) << r.out;
    expect_bits(r, base(), 5, "resumed from step 4 past a corrupt step 8");
    EXPECT_EQ(list_checkpoints(dir), std::vector<std::string>{dir + "/step-8"});
    EXPECT_TRUE(validate_checkpoint(dir + "/step-8").ok());
    EXPECT_TRUE(read_file(dir + "/step-8.corrupt/rank-00001.safetensors") == bytes) << "the corrupt one is kept as it was";
  }
  {  // a meta.json that does not parse: the run still continues the metrics file of its run
    const std::string dir = copy_checkpoints("ckpt_meta");
    write_file_atomic(dir + "/step-8/meta.json", "{ broken");
    fs::copy_file(*dir_ + "/saving.jsonl", *dir_ + "/meta.jsonl");
    const TrainRun r = train("meta", "ddp", 2, {"--ckpt-dir", dir});
    EXPECT_NE(r.out.find("checkpoint " + dir + "/step-8 failed its checks: " + dir + "/step-8/meta.json: "),
              std::string::npos) << r.out;
    expect_bits(r, base(), 5, "resumed from step 4 past a step 8 without its meta.json");
  }
}

TEST_F(Checkpoint, CorruptOrForeignCheckpointIsRefused) {
  ASSERT_EQ(saving().exit_code, 0) << saving().out;
  {  // truncated shard
    const std::string dir = copy_checkpoints("ckpt_trunc_given");
    const std::string shard = dir + "/step-8/rank-00001.safetensors";
    fs::resize_file(shard, fs::file_size(shard) - 100);
    const TrainRun r = train("trunc_given", "ddp", 2, {"--resume", dir + "/step-8"});
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find("checkpoint " + dir + "/step-8 refused: " + shard), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("newest older complete checkpoint is " + dir + "/step-4 (resume from it with --resume " + dir +
                         "/step-4)"),
              std::string::npos) << r.out;
    EXPECT_TRUE(r.losses.empty()) << r.out;
    EXPECT_TRUE(fs::exists(dir + "/step-8/meta.json")) << "a checkpoint given to --resume is left as it is";
  }
  {  // one flipped byte in the data
    const std::string dir = copy_checkpoints("ckpt_flip");
    const std::string shard = dir + "/step-8/rank-00000.safetensors";
    std::string bytes = read_file(shard);
    bytes[bytes.size() - 5] ^= 0x10;
    write_file_atomic(shard, bytes);
    const TrainRun r = train("flip", "ddp", 1, {"--resume", dir + "/step-8"});
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find(shard + ": checksum"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--resume " + dir + "/step-4"), std::string::npos) << r.out;
    EXPECT_TRUE(r.losses.empty()) << r.out;
    // The older one is named only when it is itself intact.
    fs::resize_file(dir + "/step-4/rank-00000.safetensors", 10);
    const TrainRun r2 = train("flip2", "ddp", 1, {"--resume", dir + "/step-8"});
    EXPECT_NE(r2.exit_code, 0);
    EXPECT_NE(r2.out.find("no older complete checkpoint"), std::string::npos) << r2.out;
    // Chosen from --ckpt-dir, with no good one left, the run stops too, and deletes nothing.
    const TrainRun r3 = train("flip3", "ddp", 1, {"--ckpt-dir", dir});
    EXPECT_NE(r3.exit_code, 0) << r3.out;
    EXPECT_NE(r3.out.find("checkpoint " + dir + "/step-8 failed its checks: " + shard + ": checksum "), std::string::npos)
        << r3.out;
    EXPECT_NE(r3.out.find("checkpoint " + dir + "/step-4 refused: "), std::string::npos) << r3.out;
    EXPECT_NE(r3.out.find("no older complete checkpoint"), std::string::npos) << r3.out;
    EXPECT_TRUE(r3.losses.empty()) << r3.out;
    EXPECT_EQ(list_checkpoints(dir), (std::vector<std::string>{dir + "/step-8", dir + "/step-4"}));
  }
  {  // another model (the untied fixture has other shapes too)
    const TrainRun r = train("foreign", "ddp", 1, {"--resume", ckpt() + "/step-4"}, "", "tiny-qwen3-untied");
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.out.find(ckpt() + "/step-4/meta.json: model.layers.0.self_attn.q_proj.weight has shape [128, 64] in "
                         "the checkpoint and [64, 64] in the model being trained (another model)"),
              std::string::npos)
        << r.out;
    // No hint to resume from another checkpoint of that same model.
    EXPECT_EQ(r.out.find("(resume from it with --resume"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("give this run a --ckpt-dir of its own"), std::string::npos) << r.out;
  }
}

TEST_F(Checkpoint, ChecksumsAreVerifiedChunkByChunkOrAsAWholeFile) {
  ASSERT_EQ(saving().exit_code, 0) << saving().out;
  const std::string dir = copy_checkpoints("ckpt_chunks");
  const std::string ckpt = dir + "/step-4", shard = ckpt + "/rank-00001.safetensors";
  const Json meta = read_checkpoint_meta(ckpt);
  const Json& rec = meta["shards"][1];
  EXPECT_EQ(rec["chunk_bytes"].get<uint64_t>(), kFileChunk);
  EXPECT_EQ(rec["chunk_xxh64"], Json::array({rec["xxh64"]})) << "a file of one chunk: the chunk is the file";
  const std::string bytes = read_file(shard);
  std::string flipped = bytes;
  flipped[bytes.size() / 2] ^= 0x01;
  write_file_atomic(shard, flipped);
  const Status chunked = validate_checkpoint(ckpt);
  EXPECT_NE(chunked.message().find(shard + ": checksum "), std::string::npos) << chunked.message();
  EXPECT_NE(chunked.message().find(" of bytes [0, " + std::to_string(bytes.size()) + ") differs from "),
            std::string::npos) << chunked.message();
  // A checkpoint saved before chunk checksums were recorded: its whole files' are checked.
  Json old = meta;
  for (Json& s : old["shards"]) {
    s.erase("chunk_bytes");
    s.erase("chunk_xxh64");
  }
  write_checkpoint_meta(ckpt, old);
  const Status whole = validate_checkpoint(ckpt);
  EXPECT_NE(whole.message().find(shard + ": checksum "), std::string::npos) << whole.message();
  EXPECT_NE(whole.message().find(" differs from " + rec["xxh64"].get<std::string>()), std::string::npos)
      << whole.message();
  write_file_atomic(shard, bytes);
  EXPECT_TRUE(validate_checkpoint(ckpt).ok());
}

TEST_F(Checkpoint, ExportWritesAHuggingFaceFolder) {
  ASSERT_EQ(saving().exit_code, 0) << saving().out;
  const std::string ck = ckpt() + "/step-8", fixture = testing::shared_dir() + "/fixtures/tiny-qwen3";
  const std::string f32 = *dir_ + "/export_f32";
  auto r = testing::run_anvil({"export", "--ckpt", ck, "--out", f32, "--dtype", "fp32"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto p32 = read_params(f32 + "/model.safetensors");
  EXPECT_EQ(p32, saving().params) << "the checkpoint holds the run's final weights";
  EXPECT_EQ(p32.count("lm_head.weight"), 0u) << "tied: the embedding only";
  EXPECT_EQ(json_read_file(f32 + "/config.json")["dtype"], "float32");
  EXPECT_EQ(json_read_file(f32 + "/config.json")["hidden_size"], 64);
  EXPECT_EQ(read_file(f32 + "/generation_config.json"), read_file(fixture + "/generation_config.json"));

  const std::string b16 = *dir_ + "/export_bf16";
  r = testing::run_anvil({"export", "--ckpt", ck, "--out", b16});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  SafetensorsFile fb(b16 + "/model.safetensors");
  for (auto& t : fb.tensors()) {
    ASSERT_EQ(t.dtype, DType::kBF16) << t.name;
    const std::vector<double> got = read_as_f64(t);
    const std::vector<double>& want = p32.at(t.name);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_EQ(got[i], bf16_bits_to_f32(f32_to_bf16_bits(static_cast<float>(want[i])))) << t.name << " " << i;
  }

  // Sharded past --max-shard-size, with an index that names every tensor's file.
  const std::string sh = *dir_ + "/export_sharded";
  r = testing::run_anvil({"export", "--ckpt", ck, "--out", sh, "--dtype", "fp32", "--max-shard-size", "200K"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_FALSE(fs::exists(sh + "/model.safetensors"));
  const Json index = json_read_file(sh + "/model.safetensors.index.json");
  EXPECT_EQ(index["weight_map"].size(), p32.size());
  std::map<std::string, int> files;  // tensors per file
  for (auto& [name, file] : index["weight_map"].items()) ++files[file.get<std::string>()];
  EXPECT_GT(files.size(), 1u) << r.out;
  for (auto& [f, count] : files) {
    ASSERT_TRUE(fs::exists(sh + "/" + f)) << f;
    SafetensorsFile shard(sh + "/" + f);
    size_t bytes = 0;
    for (auto& t : shard.tensors()) bytes += t.bytes;
    EXPECT_TRUE(bytes <= 200 * 1024 || count == 1) << f << ": " << bytes << " bytes in " << count << " tensors";
  }
  SafetensorsSet set(sh);
  for (auto& [name, want] : p32) {
    std::vector<float> got(want.size());
    const SafeTensorInfo* info = set.find(name);
    ASSERT_TRUE(info) << name;
    set.read_f32(name, info->shape, got.data());
    EXPECT_EQ(std::vector<double>(got.begin(), got.end()), want) << name;
  }

  // One file with the optimizer state.
  const std::string full = *dir_ + "/full.safetensors";
  r = testing::run_anvil({"export", "--ckpt", ck, "--out", full, "--full"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const auto pf = read_params(full);
  EXPECT_EQ(pf.size(), 3 * p32.size());
  for (auto& [name, w] : p32) {
    EXPECT_EQ(pf.at(name), w) << name;
    const std::vector<double>& v = pf.at("optimizer.exp_avg_sq." + name);
    double sum = 0;
    for (double x : v) sum += x;
    EXPECT_GT(sum, 0) << "AdamW v of " << name << " after 8 steps";
  }

  // A corrupt checkpoint is not exported.
  const std::string dir = copy_checkpoints("ckpt_export_bad");
  fs::resize_file(dir + "/step-8/rank-00000.safetensors", 100);
  r = testing::run_anvil({"export", "--ckpt", dir + "/step-8", "--out", *dir_ + "/never"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.out.find("rank-00000.safetensors"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(*dir_ + "/never"));
}

TEST(CheckpointSettings, ARecordedSettingIsComparedUnlessItOnlySplitsTheBatch) {
  TrainConfig c;
  c.data.source = "blocks.safetensors";
  c.data.seq_len = 64;
  c.data.micro_batch = 2;
  c.optim.schedule.lr = 0.001;
  const Json was = train_record(c, 4);
  std::vector<std::string> keys;
  for (const auto& [key, value] : was.items()) keys.push_back(key);
  EXPECT_EQ(keys, (std::vector<std::string>{"assistant_only_loss", "beta", "beta1", "beta2", "data", "dpo_loss", "eps",
                                            "fp8", "global_batch", "grad_accum", "label_smoothing", "lr", "lr_min",
                                            "max_grad_norm", "micro_batch", "objective", "ref_model",
                                            "router_aux_loss", "schedule", "seed", "seq_len", "shuffle", "steps",
                                            "warmup", "weight_decay"}));
  EXPECT_EQ(was["global_batch"], 8);
  TrainConfig aux = c;  // --router-aux-loss: another loss
  aux.model.router_aux_loss = true;
  EXPECT_EQ(continuation_changes(was, train_record(aux, 4)),
            (std::vector<std::string>{"router_aux_loss false -> true"}));

  // The same global batch split otherwise: recorded, not a change of the run.
  TrainConfig split = c;
  split.data.micro_batch = 1;
  split.data.grad_accum = 2;
  EXPECT_NE(train_record(split, 4), was);
  EXPECT_TRUE(continuation_changes(was, train_record(split, 4)).empty());

  // Changes are named in the list's order (seed before lr), the global batch by its total.
  TrainConfig other = c;
  other.optim.schedule.lr = 0.002;
  other.seed = 1;
  EXPECT_EQ(continuation_changes(was, train_record(other, 2)),
            (std::vector<std::string>{"seed 0 -> 1", "global_batch 8 -> 4", "lr 0.001 -> 0.002"}));

  // The step count shapes only a cosine schedule; a key an older checkpoint lacks is not compared.
  TrainConfig longer = c;
  longer.steps = c.steps + 10;
  EXPECT_TRUE(continuation_changes(was, train_record(longer, 4)).empty());
  TrainConfig cosine = c, cosine_longer = longer;
  cosine.optim.schedule.decay = cosine_longer.optim.schedule.decay = "cosine";
  EXPECT_EQ(continuation_changes(train_record(cosine, 4), train_record(cosine_longer, 4)),
            (std::vector<std::string>{cat("steps ", c.steps, " -> ", c.steps + 10)}));
  Json older = was;
  older.erase("lr");
  EXPECT_EQ(continuation_changes(older, train_record(other, 4)), (std::vector<std::string>{"seed 0 -> 1"}));
  // A record of another JSON type (a checkpoint's meta.json from elsewhere) is a change, not an error.
  Json odd = was;
  odd["schedule"] = 5;
  EXPECT_EQ(continuation_changes(odd, train_record(longer, 4)),
            (std::vector<std::string>{cat("steps ", c.steps, " -> ", c.steps + 10), "schedule 5 -> \"constant\""}));
}

}  // namespace
}  // namespace anvil
