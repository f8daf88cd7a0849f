// anvil export: a checkpoint as a Hugging Face model folder (model/export.h over
// io/hf_export.h), or as one safetensors file with the optimizer state (--full).
#include <cstdio>
#include <filesystem>
#include <string>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "io/checkpoint_files.h"
#include "io/hf_export.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/export.h"
#include "model/params.h"
#include "train/checkpoint_reader.h"
#include "train/progress.h"

namespace anvil {
namespace {

struct ExportOptions {
  std::string ckpt;
  std::string out;
  std::string dtype = "bf16";  // bf16 | fp32
  bool full = false;           // one safetensors file: weights and optimizer state (F32)
  int64_t max_shard_bytes = int64_t{5} << 30;
};

std::string parent_of(const std::string& path) {
  std::filesystem::path p(path);
  if (p.filename().empty()) p = p.parent_path();
  return p.parent_path().empty() ? "." : p.parent_path().string();
}

// Export holds the whole model on the host (the file is written from it).
void log_peak_host_memory() {
  char line[64];
  std::snprintf(line, sizeof line, "peak host memory %.2f GiB", peak_rss_gib());
  log_info(line);
}

// Refuses a --ckpt-dir given for one of its checkpoints, naming its newest complete one.
void refuse_checkpoint_folder(const ExportOptions& o) {
  if (!is_directory(o.ckpt) || path_exists(path_join(o.ckpt, "meta.json")) || checkpoint_step(o.ckpt) >= 0) return;
  std::string newest;
  for (const std::string& c : list_checkpoints(o.ckpt))
    if (validate_checkpoint(c).ok()) {
      newest = c;
      break;
    }
  ANVIL_ENSURE(newest.empty(), kUsage, "anvil export: ", o.ckpt, " is a checkpoint folder (--ckpt-dir), not one "
               "checkpoint; its newest complete checkpoint is ", newest, ": anvil export --ckpt ", newest, " --out ", o.out);
}

// One file: the weights under their Hugging Face names and AdamW's m and v beside them.
void write_full(const ExportOptions& o, const Json& meta, const ParamTable& table, const CheckpointReader& reader,
                const HostUnits& masters) {
  const HostUnits m = reader.read(1, table), v = reader.read(2, table);
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.set_metadata("anvil_step", std::to_string(meta["step"].get<int64_t>()));
  w.set_metadata("anvil_config", meta["config"].dump());
  for (const ParamEntry& e : table.entries()) {
    w.add(e.name, DType::kF32, e.shape, masters[static_cast<size_t>(e.unit)].data() + e.offset);
    w.add("optimizer.exp_avg." + e.name, DType::kF32, e.shape, m[static_cast<size_t>(e.unit)].data() + e.offset);
    w.add("optimizer.exp_avg_sq." + e.name, DType::kF32, e.shape, v[static_cast<size_t>(e.unit)].data() + e.offset);
  }
  const std::string parent = parent_of(o.out);
  if (!is_directory(parent)) make_directories(parent);
  w.write(o.out);
  log_info("wrote ", o.out, ": weights and AdamW state of step ", meta["step"].get<int64_t>(), " (",
           static_cast<double>(w.total_bytes()) / 1e9, " GB)");
}

void run_export(const ExportOptions& o) {
  ANVIL_ENSURE(!o.ckpt.empty() && !o.out.empty(), kUsage, "anvil export: --ckpt and --out are required");
  ANVIL_ENSURE(o.dtype == "bf16" || o.dtype == "fp32", kUsage, "anvil export: --dtype is bf16 or fp32");
  refuse_checkpoint_folder(o);
  const Status st = validate_checkpoint(o.ckpt);
  if (!st.ok()) raise(ErrorKind::kInvalidInput, checkpoint_refusal(o.ckpt, st.message()));
  const Json meta = read_checkpoint_meta(o.ckpt);
  const ModelConfig cfg = config_from_json(meta["config"], path_join(o.ckpt, "meta.json"));
  const ParamTable table(cfg, 1);
  check_model(o.ckpt, meta, table);
  const CheckpointReader reader(o.ckpt, meta);
  const HostUnits masters = reader.read(0, table);
  if (o.full) {
    write_full(o, meta, table, reader, masters);
  } else {
    HfExportSettings s;
    s.out_dir = o.out;
    s.dtype = o.dtype == "fp32" ? DType::kF32 : DType::kBF16;
    s.max_shard_bytes = o.max_shard_bytes;
    const Json& src = meta.value("source", Json::object());
    s.source_dirs = {src.value("model_dir", ""), src.value("tokenizer_dir", "")};
    const std::string toml = path_join(o.ckpt, "anvil_config.toml");
    if (path_exists(toml)) s.config_toml = read_file(toml);
    export_model(cfg, table, masters, s);
  }
  log_peak_host_memory();
}

}  // namespace

int cmd_export(int argc, char** argv) {
  ExportOptions o;
  std::string shard_size = "5G";
  Args a("export", "Turn a checkpoint (any rank count, either mode) into a Hugging Face model folder: config.json,\n"
                   "model.safetensors (sharded with an index past --max-shard-size), generation_config.json and the\n"
                   "tokenizer files of the model it was trained from. --full writes one safetensors file with the\n"
                   "weights and AdamW's m and v (optimizer.exp_avg.<name>, optimizer.exp_avg_sq.<name>) in fp32.");
  a.opt("--ckpt", &o.ckpt, "PATH", "checkpoint folder (step-N)", true)
      .opt("--out", &o.out, "DIR|FILE", "model folder to write (with --full: a .safetensors file)", true)
      .choice("--dtype", &o.dtype, {"bf16", "fp32"}, "dtype of the exported weights")
      .flag("--full", &o.full, "one file with weights and optimizer state (fp32)")
      .opt("--max-shard-size", &shard_size, "SIZE", "largest model-*.safetensors file (e.g. 5G, 500M)");
  if (!a.parse(argc, argv)) return 0;
  o.max_shard_bytes = parse_size(shard_size, "--max-shard-size");
  run_export(o);
  return 0;
}

}  // namespace anvil
