// Fuzz target: a model folder's config.json, read as a model is loaded (load_config), then
// what loading a model computes from it: the parameter table (every tensor's shape and place),
// the parameter count, RoPE's frequencies and the config.json anvil writes for a config.
#include "fuzz_input.h"
#include "model/config.h"
#include "model/params.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = anvil::fuzz::scratch_dir();
  anvil::fuzz::write_input("config.json", data, size);
  anvil::fuzz::expect_clean([&] {
    const anvil::ModelConfig c = anvil::load_config(dir);
    c.num_parameters();
    const anvil::ParamTable table(c, 1);
    // RoPE's table is made for a model whose weights fit in memory: here, small ones.
    if (c.num_parameters() <= (int64_t{1} << 24)) anvil::rope_inv_freq(c);
    anvil::config_to_json(c).dump();
  });
  return 0;
}
