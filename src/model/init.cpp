// anvil init (model/init.h): a config and freshly initialised weights, written as a model folder.
#include "model/init.h"

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/log.h"
#include "model/config.h"
#include "model/weights.h"

namespace anvil {

ModelConfig init_config(const std::string& config, const std::string& preset, int64_t num_layers) {
  ANVIL_ENSURE(config.empty() != preset.empty(), kUsage, "anvil init: give exactly one of --config and --preset");
  if (config.empty()) return preset_config(preset, num_layers);
  Json j = json_read_file(config);
  ANVIL_ENSURE(num_layers >= 0, kUsage, "--num-layers ", num_layers, " must be positive (or 0: the config's)");
  if (num_layers > 0 && j.is_object()) {
    const Json& have = j.contains("num_hidden_layers") ? j["num_hidden_layers"] : Json(num_layers);
    const int64_t layers = have.is_number_integer() ? have.get<int64_t>() : num_layers;  // else config_from_json says
    ANVIL_ENSURE(num_layers <= layers, kUsage, "--num-layers ", num_layers, ": ", config, " has ", layers,
                 " layers (num_hidden_layers; give 1 to ", layers, ", or 0 for all)");
    j["num_hidden_layers"] = num_layers;
    // The dense layers among the first num_layers keep their place; the others are gone.
    if (j.contains("mlp_only_layers") && j["mlp_only_layers"].is_array()) {
      Json kept = Json::array();
      for (const Json& l : j["mlp_only_layers"])
        if (!l.is_number_integer() || l.get<int64_t>() < num_layers) kept.push_back(l);  // else config_from_json says
      j["mlp_only_layers"] = kept;
    }
  }
  return config_from_json(j, config);
}

void run_init(const InitOptions& o) {
  const ModelConfig cfg = init_config(o.config, o.preset, o.num_layers);
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
