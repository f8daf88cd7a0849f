// anvil bench step: the training-step benchmark on random weights and tokens.
//
// One JSON line: tokens/s (the steps after the warm-up, back to back as training runs
// them: the optimizer overlapped with the next forward), MFU (model FLOPs: 6 x parameters
// in matrix products + causal attention, over the GPU's dense bf16 rate), the step-time
// breakdown (forward, backward, exposed communication, optimizer) from up to 3 more steps
// with the device synchronised at each phase boundary (so nothing overlaps there), and
// peak memory measured beside the plan's. It is the figure compared side by side with the
// reference trainer (bench/reference_train.py). num_layers shortens the model (a preset or a
// folder's config) to its first layers with fresh weights, as anvil init --num-layers does. With op_times, "op_times" adds each op's
// device and host milliseconds per step (main queue, by op and shape) from up to 3 more steps.
// "predicted" puts the step model's figures (plan/step_model.h) for the same setting beside
// the measured ones; write_op_table fits an op-cost table to the timed ops (plan/op_costs.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/json.h"
#include "model/config.h"
#include "model/params.h"
#include "model/transformer.h"
#include "train/config.h"

namespace anvil {

// The run to time is a config tree (train/config.h), with anvil train's defaults; its blocks
// (random tokens) are kSeqLenWithoutData tokens long (plan/memory_plan.h) unless
// config.data.seq_len says.
struct BenchStepOptions {
  TrainConfig config;
  int64_t warmup = 5;      // untimed first steps (of config.steps; then up to 3 more, phases timed)
  double peak_tflops = 0;  // 0: the GPU's dense bf16 rate from its name
  bool op_times = false;   // then up to 3 more steps with every op timed (Runtime::take_op_times)
  std::string write_op_table;  // with op_times: the op-cost table fitted to them, written here
  std::string op_table;        // the prediction's op costs [default: the built-in table]
  double bus_gbps = 0;         // the prediction's bus bandwidth [default: the GPU's usual link]
  int64_t num_layers = 0;      // > 0: the model's first num_layers layers, fresh weights (anvil init's config)
};

// Model FLOPs per trained token: 6 x (parameters in matrix products) + 6 x layers x
// seq_len x q_dim (causal attention, forward and backward, no recomputation counted). For a
// MoE model the parameters a token is multiplied by: the router and top_k of the num_experts
// experts of each sparse layer (MFU on active parameters).
double model_flops_per_token(const ModelConfig& c, int64_t seq_len);
// Dense bf16 TFLOP/s of a GPU by its name (H100/H200, A100, ...: plan/op_costs.h); 0 when unknown.
double gpu_peak_tflops(const std::string& device_name);
// Dense FP8 TFLOP/s of a GPU by its name (H100/H200, B200, L40S, L4); 0 when unknown or none.
double gpu_peak_fp8_tflops(const std::string& device_name);

Json run_bench_step(const BenchStepOptions& o);

}  // namespace anvil
