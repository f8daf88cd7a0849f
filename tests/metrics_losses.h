// The step records of a --metrics file as the tests read them: each logged step's loss and,
// where the step evaluated, its eval loss; the run's header record (no "step") is skipped.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <string>

#include "core/json.h"

namespace anvil::testing {

struct MetricsLosses {
  std::map<int64_t, double> loss, eval_loss;  // by step
};

inline MetricsLosses read_metrics_losses(const std::string& path) {
  MetricsLosses m;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const Json j = json_parse(line, path);
    if (!j.contains("step")) continue;  // the run's header record
    const int64_t step = j["step"].get<int64_t>();
    m.loss[step] = j["loss"].get<double>();
    if (j.contains("eval_loss")) m.eval_loss[step] = j["eval_loss"].get<double>();
  }
  return m;
}

}  // namespace anvil::testing
