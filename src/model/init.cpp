// anvil init (model/init.h): a config and freshly initialised weights, written as a model folder.
#include "model/init.h"

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/log.h"
#include "model/config.h"
#include "model/weights.h"

namespace anvil {

void run_init(const InitOptions& o) {
  ANVIL_ENSURE(o.config.empty() != o.preset.empty(), kUsage, "anvil init: give exactly one of --config and --preset");
  ModelConfig cfg;
  if (o.config.empty()) {
    cfg = preset_config(o.preset, o.num_layers);
  } else {
    Json j = json_read_file(o.config);
    ANVIL_ENSURE(o.num_layers >= 0, kUsage, "--num-layers ", o.num_layers, " must be positive (or 0: the config's)");
    if (o.num_layers > 0 && j.is_object()) j["num_hidden_layers"] = o.num_layers;
    cfg = config_from_json(j, o.config);
  }
  make_directories(o.out);
  ParamTable table(cfg, 1);
  HostUnits units = make_host_units(table);
  init_weights(cfg, table, o.seed, units);
  Json j = cfg.raw.is_object() ? cfg.raw : config_to_json(cfg);
  j["dtype"] = o.dtype == "bf16" ? "bfloat16" : "float32";
  json_write_file(path_join(o.out, "config.json"), j);
  save_hf_weights(path_join(o.out, "model.safetensors"), table, units, o.dtype == "bf16" ? DType::kBF16 : DType::kF32);
  log_result("wrote ", o.out, ": ", cfg.architecture, ", ", table.total_numel(), " parameters");
}

}  // namespace anvil
