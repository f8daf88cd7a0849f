// What an op costs on a GPU: the op-cost table the step model (plan/step_model.h) prices a
// step with, and the GPUs it knows.
//
// The table is per op kind and size: a matrix product or attention is priced by its FLOPs
// at a rate (TFLOP/s), every other op by the bytes it moves at a rate (TB/s), an FP8 linear
// by both: its GEMM's FLOPs at the op's rate and its operands' casts' bytes at fp8_cast's.
// Each rate belongs to a size (rows of a per-token op and of an FP8 linear, MFLOP per call of
// a bf16 linear and of the fused cross-entropy, the sequence length of attention, elements of
// the optimizer's ops: plan/step_ops.h) and a call takes the rate at its size
// interpolated between the measured sizes around it (linear in log size; past the ends,
// the end's), so shapes and models that were not measured are predicted from those that
// were. A fixed cost per op call (per_op_us) is added. The table names its GPU's dense bf16
// peak and HBM bandwidth; another GPU's rates are scaled by its peak (FLOP-priced ops) or
// bandwidth (byte-priced ops).
//
// The H200 table ships inside the binary (src/plan/h200_op_costs.json, embedded at build
// time by CMake, so `anvil plan` needs no file beside the binary and cannot find a stale
// one); `anvil plan --op-table FILE` reads another. `anvil bench step --op-times
// --write-op-table FILE` writes one from a measured step (fit_op_table), and
// `bench/run.py op_table` measures the H200's.
#pragma once

#include <string>
#include <vector>

#include "core/json.h"
#include "ops/ops.h"
#include "plan/step_ops.h"
#include "sys/topo.h"

namespace anvil {

// A GPU's datasheet figures: dense bf16 and FP8 tensor-core peaks, HBM bandwidth, and the usual
// link between GPUs of one machine with the collectives' bus bandwidth assumed over it.
struct GpuSpec {
  const char* key;  // matched as a substring of the device's name ("H200")
  double peak_tflops;
  double peak_fp8_tflops;  // 0: no FP8 tensor cores
  double hbm_tbps;
  const char* link;
  double bus_gbps;
};
const GpuSpec* find_gpu_spec(const std::string& device_name);  // nullptr when unknown
std::string known_gpu_names();

// The all-reduce bus bandwidth assumed over the links `anvil topo` finds: NVLink between every
// pair, 80% of a GPU's links' bandwidth per direction (18 x 25 GB/s on an H200: 360 GB/s, the
// figure of GpuSpec); otherwise the GPUs talk through PCIe and the host: 20 GB/s (gen4).
// 0 with fewer than two GPUs. `why` says which.
double topology_bus_gbps(const Topology& t, std::string* why);

// FLOP-priced ops: the matrix products, attention, the fused cross-entropy.
bool op_priced_by_flops(const std::string& op);
// The rate entry of the FP8 linears' operand casts (OpCall::cast_bytes), by the linear's rows.
inline constexpr const char* kFp8CastOp = "fp8_cast";

struct OpRate {
  std::string op;
  int64_t size = 0;  // the size it was measured at (0: any size)
  double rate = 0;   // TFLOP/s or TB/s (op_priced_by_flops)
  bool measured = false;
};

struct OpCostTable {
  std::string gpu;  // the GPU the rates are for ("H200")
  double peak_tflops = 0, hbm_tbps = 0;
  double per_op_us = 0;     // added to every call
  double per_op_calls = 0;  // the op calls per_op_us was fitted over (0: not fitted)
  // c: beside a collective the compute runs at 1 / (1 + c) of its speed (plan/step_model.h).
  double comm_overlap_cost = 0;
  bool measured = false;
  std::string source;  // how the rates were obtained
  std::vector<OpRate> rates;

  static OpCostTable builtin();  // the H200 table embedded at build time
  static OpCostTable load(const std::string& path);  // a table file (write_op_table's); empty: builtin()
  static OpCostTable from_json(const Json& j, const std::string& what);
  Json to_json() const;
  // Seconds of one call of `c` on `gpu`, at least 0; throws kInvalidInput when the table has no
  // rate for the op. The FP8 linears' GEMMs scale to another GPU by the bf16 peaks too (every
  // GPU here with FP8 tensor cores has twice its bf16 rate in FP8), their casts by bandwidth.
  double seconds(const OpCall& c, const GpuSpec& gpu) const;
  // Why a step with --fp8 cannot be priced on `gpu` (no FP8 tensor cores, or no FP8 linear
  // or cast rates in the table), or "".
  std::string why_not_fp8(const GpuSpec& gpu) const;
};

// A table fitted from one measured step: `program` is the step's op list (step_program),
// `measured` the same step's op times (Runtime::take_op_times, per step), `step_ms` the step's
// time untimed. Each (op, size) gets the rate sum of work / sum of device time of its
// labels, except the FP8 linears: at each row count one GEMM rate per op and one cast rate,
// fitted by least squares over their shapes (none where they do not separate, with a
// warning); per_op_us is what the untimed step differs from the ops' sum, per call (the
// timing events' cost shows as a negative figure). Only the step's ops have rates, and only
// from calls of at least 1 MiB or 0.1 GFLOP (smaller ones measure their launch).
OpCostTable fit_op_table(const std::vector<StepItem>& program, const std::vector<Runtime::OpTime>& measured,
                         double step_ms, const GpuSpec& gpu, const std::string& source);
// `fit` completed from `base`: an earlier fit of the same GPU keeps its measured sizes that
// `fit` did not measure (per_op_us the mean over both fits' calls), so steps of several
// shapes build one table; base's rates of the ops `fit` has none of are kept, marked not
// measured (scaled to fit's GPU), and so is comm_overlap_cost (one GPU has no collectives;
// `bench/run.py op_table` prints the figure its two-GPU rows imply).
OpCostTable merge_op_tables(const OpCostTable& fit, const OpCostTable& base);

// The embedded JSON (generated at build time from src/plan/h200_op_costs.json).
const char* builtin_op_table_json();

}  // namespace anvil
