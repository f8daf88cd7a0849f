// What the DPO training tests share (tests/test_dpo_train.cpp on the CPU,
// tests/cuda/test_cuda_dpo.cpp on the GPU): the demo tokenizer's folder, 48 random preference
// rows of sums (a correct answer chosen, a wrong one rejected; half with a prompt, half in the
// implicit-prompt form), the tiny preset's `anvil train --objective dpo` over them, and the
// step records of its --metrics file with TRL's metric names.
#pragma once

#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "core/json.h"
#include "testing.h"

namespace anvil::testing {

// data/demo of the project, found from tests/data (ANVIL_TEST_DATA_DIR where the tests travel).
inline std::string demo_dir() { return testdata_dir() + "/../../data/demo"; }

inline std::string write_pairs(const std::string& dir) {
  std::mt19937 r(7);
  std::ofstream f(dir + "/pairs.jsonl");
  for (int k = 0; k < 48; ++k) {
    const unsigned a = r() % 50 + 1, b = r() % 50 + 1;
    const std::string q = "What is " + std::to_string(a) + " + " + std::to_string(b) + "?";
    const std::string good = std::to_string(a + b), bad = std::to_string(a * b + 1);
    if (k % 2)
      f << R"({"prompt": [{"role": "user", "content": ")" << q << R"("}], "chosen": [{"role": "assistant", "content": ")"
        << good << R"("}], "rejected": [{"role": "assistant", "content": ")" << bad << "\"}]}\n";
    else
      f << R"({"chosen": [{"role": "user", "content": ")" << q << R"("}, {"role": "assistant", "content": ")" << good
        << R"("}], "rejected": [{"role": "user", "content": ")" << q << R"("}, {"role": "assistant", "content": ")"
        << bad << "\"}]}\n";
  }
  return dir + "/pairs.jsonl";
}

// 4 steps of DPO (beta 0.2) on DIR's pairs at sequence 96, MICRO pairs a micro-batch; the
// metrics in OUT.jsonl, the export in OUT.
inline std::vector<std::string> dpo_train_args(const std::string& device, const std::string& dir,
                                               const std::string& out, int micro) {
  return {"train", "--device", device, "--preset", "tiny", "--tokenizer", demo_dir(), "--data", dir + "/pairs.jsonl",
          "--data-cache", dir + "/cache", "--seq-len", "96", "--objective", "dpo", "--beta", "0.2", "--steps", "4",
          "--micro-batch", std::to_string(micro), "--lr", "1e-3", "--log-every", "1", "--metrics", out + ".jsonl",
          "--export", out, "--export-dtype", "fp32"};
}

// The metrics a DPO step record holds besides the loss (TRL's names).
inline const std::vector<std::string>& dpo_metric_names() {
  static const std::vector<std::string> names = {"loss", "rewards/chosen", "rewards/rejected", "rewards/margins",
                                                 "logps/chosen", "logps/rejected", "rewards/accuracies"};
  return names;
}

inline std::vector<Json> step_records(const std::string& path) {
  std::vector<Json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const Json j = Json::parse(line);
    if (j.contains("step") && j.contains("loss")) out.push_back(j);
  }
  return out;
}

}  // namespace anvil::testing
