// anvil init: a Hugging Face model folder with freshly initialised weights.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"

namespace anvil {

struct InitOptions {
  std::string config;  // config.json to read, or empty with preset
  std::string preset;
  std::string out;
  uint64_t seed = 0;
  std::string dtype = "fp32";  // fp32 | bf16
  int64_t num_layers = 0;      // > 0: the first num_layers layers only (a shallower copy)
};

void run_init(const InitOptions& o);
// The config anvil init writes, from exactly one of `config` (a config.json file) and `preset`:
// its first num_layers layers only where num_layers > 0 (at most its own; mlp_only_layers keeps
// the entries among them). anvil bench step
// --num-layers builds its shallower model through it too.
ModelConfig init_config(const std::string& config, const std::string& preset, int64_t num_layers);

}  // namespace anvil
