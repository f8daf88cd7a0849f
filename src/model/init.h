// anvil init: a Hugging Face model folder with freshly initialised weights.
#pragma once

#include <cstdint>
#include <string>

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

}  // namespace anvil
