// Resolving --model and --data hub ids: a local folder, or a hub id ("Qwen/Qwen3-1.7B",
// "trl-lib/Capybara") already present in the local Hugging Face cache. anvil downloads nothing.
#pragma once

#include <string>

namespace anvil {

// True for ORG/NAME: one slash, neither end, not a path starting with / or . .
bool looks_like_hub_id(const std::string& spec);

// What "looked in" says when no cache location is set.
constexpr const char* kNoHubCache = "no cache: HF_HUB_CACHE, HF_HOME and HOME are unset";

// The folder of the model: spec itself when it is a folder, else the snapshot of the hub id
// in HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub (refs/main when present, else
// the newest snapshot). Throws kNotFound naming every place it looked.
std::string resolve_model_dir(const std::string& spec);

// The snapshot folder of dataset `id` (datasets--ORG--NAME in the same caches, same rule),
// or "" when no cache holds it; *looked lists the folders tried.
std::string find_dataset_snapshot(const std::string& id, std::string* looked);

}  // namespace anvil
