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
  ModelConfig cfg = o.config.empty() ? preset_config(o.preset) : config_from_json(json_read_file(o.config), o.config);
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
