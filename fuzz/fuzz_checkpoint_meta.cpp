// Fuzz target: a checkpoint's meta.json, read as `anvil export` and a resume read it: the
// checkpoint validated (files and sizes), the model config inside it loaded, its name table
// checked against that model's, and the masters read from the shard file through it. The
// shard file beside it is fixed: the state of the model of fuzz/fixtures/checkpoint/config.json
// on one rank, as a save lays it out (io/checkpoint_files.h), so that the seeds (that model's
// meta.json, from a real run) reach the reads.
#include <filesystem>

#include "core/fs.h"
#include "core/json.h"
#include "fuzz_input.h"
#include "io/checkpoint_files.h"
#include "model/config.h"
#include "model/params.h"
#include "train/checkpoint_reader.h"

namespace {

// scratch/step-1 with rank-00000.safetensors holding master, exp_avg and exp_avg_sq of every
// unit of the fixture's model (zeros).
std::string make_checkpoint() {
  const std::string ckpt = anvil::fuzz::scratch_dir() + "/step-1";
  std::filesystem::create_directories(ckpt);
  const anvil::ModelConfig c = anvil::load_config(anvil::fuzz::fixture_path("checkpoint"));
  const anvil::ParamTable table(c, 1);
  std::vector<anvil::ShardTensor> tensors;
  for (const char* kind : anvil::kStateKinds)
    for (size_t u = 0; u < table.units().size(); ++u)
      tensors.push_back({anvil::cat(kind, ".", u), table.units()[u].shard()});
  anvil::write_shard(anvil::path_join(ckpt, anvil::shard_file_name(0)), tensors,
                     [](size_t, int64_t, int64_t n, float* out) { std::fill(out, out + n, 0.0f); });
  return ckpt;
}

const std::string& checkpoint() {
  static const std::string ckpt = make_checkpoint();
  return ckpt;
}

void read_checkpoint(const std::string& ckpt) {
  anvil::validate_checkpoint(ckpt, false).throw_if_error();
  const anvil::Json meta = anvil::read_checkpoint_meta(ckpt);
  const anvil::ModelConfig c = anvil::config_from_json(meta["config"], ckpt);
  const anvil::ParamTable table(c, 1);
  anvil::check_model(ckpt, meta, table);
  const anvil::CheckpointReader reader(ckpt, meta);
  reader.read(0, table);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  checkpoint();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  anvil::fuzz::write_input("step-1/meta.json", data, size);
  anvil::fuzz::expect_clean([&] { read_checkpoint(checkpoint()); });
  return 0;
}
