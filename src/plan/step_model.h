// The step model: a training step's time and tokens/s, predicted before anything runs, for
// `anvil plan --nproc N` (and beside the measured figure in `anvil bench step`).
//
// compute: the sum of the op costs (plan/op_costs.h) of every op the step issues
//   (plan/step_ops.h: the forward, backward and recomputation of each micro-batch, then
//   the optimizer: the gradient norm and AdamW of the rank's owned elements).
// communication: the collectives the step issues, each taking size x factor / bus
//   bandwidth (nccl-tests' busbw; factor 2(N-1)/N for an all-reduce, (N-1)/N for an
//   all-gather or reduce-scatter). ddp: every unit's gradient all-reduced once a step on the
//   --reduce-dtype wire; fsdp: every unit's bf16 weights all-gathered in the forward and the
//   blocks' again in the backward (the last block kept), every unit's gradient
//   reduce-scattered each micro-batch (once a step with --fsdp-defer-sync); zero2: as fsdp's
//   reductions, and every unit's bf16 weights all-gathered once a step, at its first use in
//   the forward (after its update).
// exposed communication, the overlap rule: the step is replayed on two queues in issue
//   order, compute (the ops, one after another) and communication (the collectives, one
//   after another, each starting when the link is free and the compute queued before it
//   has run, as the NCCL comm orders it); where the compute waits for a collective (a
//   gathered unit's first use, the one reduction in flight of a wire copy, the optimizer's
//   wait for every gradient) the compute queue idles until it ends. So a collective is
//   hidden up to the compute between its issue and its first use, the first gather of a
//   step and the last reduction never are: exposed = the compute queue's idle time.
// compute slowed beside the collectives: while a collective is on the link the compute runs
//   at 1 / (1 + comm_overlap_cost) of its speed (the op-cost table's figure), for NCCL's
//   kernels take multiprocessors and memory bandwidth from it; so it loses c / (1 + c) of the
//   communication it hides. step = compute + exposed + slowed.
// The optimizer runs after the backward on the compute queue: overlapped with the next
// forward it takes turns with it on the multiprocessors and saves little (bench/NOTES.md).
// expert parallel (--expert-parallel N): the sparse layers' exchange at the balanced routing,
//   its all_to_alls (dispatch and combine, forward and backward, again under full
//   recomputation) over the same bus, the compute waiting on each; the experts units'
//   all-reduce over their D = world / N replicas (2(D-1)/D); the rest per the mode over the run.
// Not modelled: the collectives' latency (each is large: a unit's weights or gradient; the
// experts' all_to_alls are the exception: 4 a sparse layer), the host exchange of the expert
// offsets before each sparse layer's forward (model/expert_parallel.h), and
// packed batches' attention (anvil's kernel on each document: bench step's batches are wrapped).
#pragma once

#include <string>

#include "plan/op_costs.h"
#include "plan/step_ops.h"

namespace anvil {

// The collectives' nccl-tests sizes summed over a step, by kind.
struct CommBytes {
  int64_t all_gather = 0, reduce_scatter = 0, all_reduce = 0;
  int64_t all_to_all = 0;  // the experts' exchange (StepItem::all_to_all)
};
CommBytes comm_bytes(const std::vector<StepItem>& program);
// Bytes over the bus (each size times its bus factor) of a step's all-gathers, reduce-scatters
// and all-reduces on `world` ranks.
double bus_bytes(const CommBytes& b, int world);
// A collective's bus factor: nccl-tests' of its kind over its group (StepItem::ranks, else
// `world`); the experts' all_to_all (n-1)/n.
double bus_factor(const StepItem& collective, int world);
// Seconds of the step's ops on `gpu` by the table (no communication, nothing overlapped).
double compute_seconds(const std::vector<StepItem>& program, const OpCostTable& table, const GpuSpec& gpu);

struct StepPrediction {
  double step_s = 0, tokens_per_s = 0;
  double forward_s = 0, backward_s = 0, optimizer_s = 0;  // compute, by phase
  double comm_s = 0;     // every collective's time, overlapped or not
  double exposed_s = 0;  // what the overlap does not hide
  double slowed_s = 0;   // compute time lost beside the collectives it overlaps
  CommBytes bytes;
};

// bus_gbps: the collectives' bus bandwidth (GB/s; 0 with world 1, where there are none).
StepPrediction predict_step(const PlannedRun& run, const OpCostTable& table, const GpuSpec& gpu, double bus_gbps);

// One line of `anvil plan`: "predicted ddp: 123,456 tokens/s, step 12.3 ms (forward ..., backward
// ..., optimizer ...; communication ..., exposed ..., compute slowed beside it ...)", the part
// after ";" only where there are collectives.
std::string prediction_line(const char* mode, const StepPrediction& p);

}  // namespace anvil
