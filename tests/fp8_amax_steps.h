// The run that the CPU and GPU tests of the FP8 amax slots (model/fp8_slots.h) compare with
// itself: the tiny preset trained 3 steps of 2 micro-batches with --fp8 tensorwise, with
// ANVIL_FP8_AMAX_REUSE set as asked (read when the model is built), so that the same steps with
// the slots and without them can be checked bit for bit.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "model/weights.h"
#include "train/open_run.h"

namespace anvil::testing {

struct Fp8AmaxSteps {
  std::vector<double> losses, norms;  // every step's
  HostUnits masters;                  // after the last step
};

inline Fp8AmaxSteps fp8_amax_steps(bool reuse, const std::string& device, ParallelMode mode, Recompute recompute,
                                   int64_t mlp_tile, int64_t seq_len) {
  EXPECT_EQ(setenv("ANVIL_FP8_AMAX_REUSE", reuse ? "1" : "0", 1), 0);
  const ModelConfig model = preset_config("tiny");
  ParamTable table(model, 1);
  HostUnits init = make_host_units(table);
  init_weights(model, table, 5, init);
  TrainConfig c;
  c.model.device = device;
  c.parallel.mode = mode;
  c.parallel.fp8 = Fp8Recipe::kTensorwise;
  c.parallel.recompute = recompute;
  c.parallel.mlp_tile = mlp_tile;
  c.data.micro_batch = 2;
  c.data.grad_accum = 2;
  c.data.seq_len = seq_len;
  c.optim.schedule.lr = 1e-3;
  c.steps = 3;
  const std::unique_ptr<Trainer> trainer = make_trainer(model, host_units_reader(init), c, seq_len, nullptr, 0);
  unsetenv("ANVIL_FP8_AMAX_REUSE");
  std::mt19937_64 rng(17);
  Fp8AmaxSteps r;
  for (int64_t step = 0; step < c.steps; ++step) {
    std::vector<TokenBatch> micro(static_cast<size_t>(c.data.grad_accum));
    for (TokenBatch& b : micro)
      for (int64_t i = 0; i < c.data.micro_batch * seq_len; ++i)
        b.ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(model.vocab_size)));
    const StepStats st = trainer->step(micro);
    r.losses.push_back(st.loss);
    r.norms.push_back(st.grad_norm);
  }
  r.masters = trainer->masters();
  return r;
}

// The run with the slots against the run without them: every loss and gradient norm and the
// final master weights, bit for bit.
inline void expect_fp8_amax_slots_change_no_bit(const std::string& what, const std::string& device, ParallelMode mode,
                                                Recompute recompute, int64_t mlp_tile, int64_t seq_len) {
  const Fp8AmaxSteps own = fp8_amax_steps(false, device, mode, recompute, mlp_tile, seq_len);
  const Fp8AmaxSteps slots = fp8_amax_steps(true, device, mode, recompute, mlp_tile, seq_len);
  ASSERT_EQ(own.losses.size(), 3u) << what;
  EXPECT_EQ(slots.losses, own.losses) << what;
  EXPECT_EQ(slots.norms, own.norms) << what;
  EXPECT_TRUE(slots.masters == own.masters) << what << ": master weights differ";
  if (!::testing::Test::HasFailure())
    std::printf("%s: 3 steps, loss %.6f -> %.6f, with the amax slots the same bits as without\n", what.c_str(),
                own.losses.front(), own.losses.back());
}

}  // namespace anvil::testing
