// The Hugging Face model folder an export writes: config.json, the weights as safetensors
// (model.safetensors, or model-0000i-of-0000n.safetensors shards and their index),
// generation_config.json, the tokenizer files, and the run's settings. Both configs carry
// eos_token_id: the model's, else the id of the tokenizer's eos_token, so that generation
// stops where the chat template ends a turn.
//
// io/ sits below model/: the model arrives as its config.json text and a list of named fp32
// host tensors (model/export.h builds both from a ModelConfig and a ParamTable).
#pragma once

#include <cstdint>
#include <optional>
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

// The id of tokenizer_config.json's eos_token in folder dir: from its added_tokens_decoder,
// else from tokenizer.json's added tokens or vocabulary. Empty when the folder names no
// eos_token or it has no id there.
std::optional<int64_t> tokenizer_eos_id(const std::string& dir);

// Writes the folder: `config` is the model's config.json (its "dtype" set to the export's,
// eos_token_id added from the tokenizer's when it has none), `tensors` the weights in file
// order, sharded into files of at most max_shard_bytes each (a larger tensor alone).
// Weights of an earlier export in out_dir are removed first.
void export_hf_folder(const Json& config, const std::vector<HfTensor>& tensors, const HfExportSettings& settings);

}  // namespace anvil
