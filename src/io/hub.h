// Resolving --model: a local folder, or a hub id ("Qwen/Qwen3-1.7B") already present in the
// local Hugging Face cache. anvil downloads nothing.
#pragma once

#include <string>

namespace anvil {

// The folder of the model: spec itself when it is a folder, else the snapshot of the hub id
// in HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub (refs/main when present, else
// the newest snapshot). Throws kNotFound naming every place it looked.
std::string resolve_model_dir(const std::string& spec);

}  // namespace anvil
