// The Hugging Face model folder an export writes: config.json, the weights as safetensors
// (model.safetensors, or model-0000i-of-0000n.safetensors shards and their index),
// generation_config.json, the tokenizer files, and the run's settings.
//
// io/ sits below model/: the model arrives as its config.json text and a list of named fp32
// host tensors (train/ builds both from its ModelConfig and ParamTable).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/tensor.h"

namespace anvil {

// One weight of the exported model: its Hugging Face name, shape and fp32 values on the host.
struct HfTensor {
  std::string name;
  Shape shape;
  const float* data = nullptr;  // shape.numel() values
};

struct HfExportSettings {
  std::string out_dir;
  DType dtype = DType::kBF16;
  int64_t max_shard_bytes = int64_t{5} << 30;
  std::vector<std::string> source_dirs;  // searched in order for tokenizer and generation files
  std::string config_toml;               // the run's settings: anvil_config.toml when not empty
};

// Writes the folder: `config` is the model's config.json (its "dtype" set to the export's),
// `tensors` the weights in file order, sharded into files of at most max_shard_bytes each (a
// larger tensor alone). Weights of an earlier export in out_dir are removed first.
void export_hf_folder(const Json& config, const std::vector<HfTensor>& tensors, const HfExportSettings& settings);

}  // namespace anvil
