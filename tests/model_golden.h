// anvil grad against an oracle's golden.safetensors (tests/oracle/model_oracle.py's
// write_golden: transformers' float64 loss, logits and gradients), as the model parity tests
// read them: loss rel 1e-6, logits rel L2 1e-5, every gradient rel L2 1e-4.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "testing.h"

namespace anvil::testing {

// The worst relative errors over the cases compared so far.
struct Worst {
  double loss = 0, logits = 0, grad = 0;
  std::string grad_name;
};

// `anvil grad --device cpu` on case folder c and its tokens file (and `extra` flags); the output file.
inline std::string anvil_grad(const std::string& c, const std::string& tokens, const std::string& out,
                              const std::vector<std::string>& extra = {}) {
  std::vector<std::string> args = {"grad", "--device", "cpu", "--model", c, "--tokens", c + "/" + tokens, "--out",
                                   c + "/" + out};
  args.insert(args.end(), extra.begin(), extra.end());
  const auto r = run_anvil(args);
  EXPECT_EQ(r.exit_code, 0) << c << ": " << r.out;
  return c + "/" + out;
}

// Checks anvil's loss, logits and every gradient in `got` against the oracle's `want`.
inline void expect_golden(const std::string& got_path, const std::string& want_path, const std::string& what,
                          Worst& worst) {
  SafetensorsFile got(got_path), want(want_path);
  const double loss = read_as_f64(got.get("loss"))[0], want_loss = read_as_f64(want.get("loss"))[0];
  const double loss_err = std::abs(loss - want_loss) / std::abs(want_loss);
  EXPECT_LE(loss_err, 1e-6) << what << " loss " << loss << " want " << want_loss;
  const auto logits = read_as_f64(got.get("logits")), want_logits = read_as_f64(want.get("logits"));
  EXPECT_TRUE(close_rel_l2(logits, want_logits, 1e-5)) << what << " logits";
  worst.loss = std::max(worst.loss, loss_err);
  worst.logits = std::max(worst.logits, rel_l2(logits.data(), want_logits.data(), logits.size()));
  int grads = 0;
  for (const SafeTensorInfo& info : want.tensors()) {
    const std::string& name = info.name;
    if (name.rfind("grad.", 0) != 0) continue;
    // Tied models: anvil writes the embedding's gradient only, which holds the head's.
    const SafeTensorInfo* g = got.find(name);
    if (!g && name == "grad.lm_head.weight") continue;
    ASSERT_NE(g, nullptr) << what << ": anvil wrote no " << name;
    const auto gv = read_as_f64(*g), wv = read_as_f64(info);
    EXPECT_TRUE(close_rel_l2(gv, wv, 1e-4)) << what << " " << name;
    const double e = rel_l2(gv.data(), wv.data(), gv.size());
    if (e > worst.grad) worst.grad = e, worst.grad_name = what + " " + name;
    ++grads;
  }
  EXPECT_GT(grads, 0) << what;
}

}  // namespace anvil::testing
