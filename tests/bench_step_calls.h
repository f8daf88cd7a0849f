// The op calls `anvil bench step --op-times` reports, read from its JSON line: the step-model
// tests compare them with the ops the model lists.
#pragma once

#include <map>
#include <string>

#include "core/json.h"
#include "testing.h"

namespace anvil::testing {

// The calls a step of each op (by label) in the JSON line of `anvil bench step --op-times` that
// `r` printed; a failure added (and nothing returned) where it exited non-zero or printed none.
inline std::map<std::string, double> bench_step_op_calls(const RunResult& r) {
  EXPECT_EQ(r.exit_code, 0) << r.out;
  std::map<std::string, double> calls;
  const size_t key = r.out.find("\"bench\":\"step\"");
  if (key == std::string::npos) {
    ADD_FAILURE() << "no JSON line in " << r.out;
    return calls;
  }
  const size_t line = r.out.rfind('\n', key), begin = line == std::string::npos ? 0 : line + 1;
  const Json j = json_parse(r.out.substr(begin, r.out.find('\n', key) - begin), "bench step's line");
  for (const Json& op : j.at("op_times").at("ops"))
    calls[op.at("op").get<std::string>()] = op.at("calls").get<double>();
  return calls;
}

}  // namespace anvil::testing
