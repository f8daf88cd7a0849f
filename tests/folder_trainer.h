// A Trainer on one process with a model folder's weights, for tests that build one from a
// config of their own (the folder's weights read into host units, then handed over).
#pragma once

#include <memory>
#include <string>

#include "model/weights.h"
#include "train/open_run.h"

namespace anvil::testing {

inline std::unique_ptr<Trainer> folder_trainer(const std::string& dir, const ModelConfig& cfg, const TrainConfig& c) {
  ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  load_hf_weights(dir, table, w);
  return make_trainer(cfg, host_units_reader(w), c, c.data.seq_len, nullptr, 0);
}

}  // namespace anvil::testing
