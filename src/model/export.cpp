// A model as a Hugging Face model folder (see model/export.h).
#include "model/export.h"

#include <vector>

namespace anvil {

Json hf_config_json(const ModelConfig& config) { return config.raw.is_object() ? config.raw : config_to_json(config); }

void export_model(const ModelConfig& config, const ParamTable& table, const HostUnits& units,
                  const HfExportSettings& settings) {
  std::vector<HfTensor> tensors;
  for (const ParamEntry& e : table.entries())
    tensors.push_back({e.name, e.shape, units[static_cast<size_t>(e.unit)].data() + e.offset});
  export_hf_folder(hf_config_json(config), tensors, settings);
}

}  // namespace anvil
