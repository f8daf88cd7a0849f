// Expert parallelism (--expert-parallel N; docs/ARCHITECTURE.md, Expert parallelism): a sparse
// layer's experts split over the N ranks of an expert-parallel group, each rank holding E/N of
// them (model/params.h, ExpertLayout). The block (model/block.h) routes and sorts its tokens
// as one process does; ExpertParallel then sends every sorted row to the group rank that owns
// its expert, runs the local experts on the rows it receives (the ops of one process:
// moe_linear_forward, the SwiGLU, the down projection, on the local weights and offsets), and
// sends the results back into the sorted rows, which the combine reads as before. The
// backward is the mirror. Deterministic: every rank's expert offsets are exchanged on the host
// (so every member knows what it sends and receives, and the padded chunk of the rows'
// all_to_all), the received rows are laid out by local expert, then source rank, then the
// source's sorted order, and a row's values are those of one process.
// What the local experts' backward reads (their input rows and gate/up, per sparse layer) and
// the exchange's buffers depend on the routing: they are reserved at construction for the
// planned rows (planned_expert_rows: the balanced count times kExpertRowsMargin, at most the
// most a rank can receive), which the memory plan counts (expert_parallel_bytes), and grow past
// them only where a routing needs more.
#pragma once

#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "model/activations.h"
#include "model/config.h"
#include "model/params.h"
#include "ops/ops.h"

namespace anvil {

// The rows of a sparse layer's exchange on one rank: received for its local experts (`local`),
// and in each member's chunk of the rows' all_to_all (`chunk`, the largest count between two
// members).
struct ExpertRows {
  int64_t local = 0, chunk = 0;
};
// The margin the exchange is planned with over the balanced routing (each of the N members
// sends n K / N of its n tokens' K rows to each member, so a rank receives n K rows).
constexpr int64_t kExpertRowsMargin = 2;
// The planned rows with `tokens` tokens a rank and `degree` members: kExpertRowsMargin times the
// balanced count, at most the most possible (a token's rows to one member: min(K, E / N)).
ExpertRows planned_expert_rows(const ModelConfig& c, int64_t tokens, int degree);
// The device bytes ExpertParallel holds for `rows` in `dtype` (the compute dtype): per sparse
// layer the local offsets, input rows and gate/up its backward reads; the send and receive
// buffers; the local experts' activations and gradients.
int64_t expert_parallel_bytes(const ModelConfig& c, int degree, ExpertRows rows, DType dtype);

class ExpertParallel {
 public:
  // group: the expert-parallel group (N ranks, group rank = the shard held); run: the run's
  // comm (host exchanges); layout: this rank's (its replica index places the group); tokens:
  // this rank's per micro-batch (the buffers reserved for planned_expert_rows).
  ExpertParallel(const ModelConfig& c, Ops& ops, Comm& group, Comm& run, const ExpertLayout& layout,
                 int64_t tokens);
  ~ExpertParallel();
  ExpertParallel(const ExpertParallel&) = delete;
  ExpertParallel& operator=(const ExpertParallel&) = delete;

  // After the sort and gather (a[kMoeX], a[kMoeOffsets]): a[kMoeY], the experts' outputs of
  // the sorted rows, through their owners; w: the local experts' weights (E/N of each).
  void forward(const BlockWeights& w, const Activations& a, int64_t layer);
  // a[kMoeDY]: d loss / d moe_y on entry, d loss / d moe_x on return (moe_gather_backward's
  // input); the local experts' weight gradients into g, added to (accumulate) or written.
  void backward(const BlockWeights& w, const BlockWeights& g, bool accumulate, const Activations& a, int64_t layer);

  // The rows the buffers were reserved for, and the most this rank's layers have met so far
  // (received for its experts; in one member's chunk of the exchange).
  ExpertRows planned() const { return planned_; }
  ExpertRows most() const { return most_; }

 private:
  // Device memory that grows to the largest request (released at destruction).
  struct Grown {
    void* data = nullptr;
    size_t bytes = 0;
  };
  // One sparse layer's routing over the group and what its backward reads.
  struct Layer {
    std::vector<int32_t> offsets;  // every member's expert offsets, (N, E + 1)
    int64_t chunk = 0;             // rows per chunk of the all_to_all (the largest count between two members)
    int64_t rows = 0;              // rows received for the local experts
    Grown local_offsets, x, gate_up;  // (E/N + 1) I32; (rows, C) and (rows, 2 Im), kept for the backward
  };
  Tensor view(Grown& g, Shape shape, DType dtype);
  // most_ raised to l's rows, with a warning the first time they pass the planned rows.
  void note_rows(const Layer& l);
  // Every buffer viewed at `rows` (expert_parallel_bytes counts the same shapes).
  void reserve(ExpertRows rows);
  // Rows member j sends to member k, and where they start in j's sorted rows.
  int64_t count(const Layer& l, int j, int k) const;
  int64_t start(const Layer& l, int j, int k) const;
  // Row p of member j's expert e lies at this offset within j's chunk to its owner.
  int64_t within(const Layer& l, int j, int64_t e) const;
  // rows rows of C elements from row in_row of in to row out_row of out.
  void copy(Tensor out, int64_t out_row, Tensor in, int64_t in_row, int64_t rows);
  // Sorted rows (S, C) -> the local rows (l.rows, C), through the owners: out and back.
  void dispatch(const Layer& l, Tensor sorted, Tensor local);
  void collect(const Layer& l, Tensor local, Tensor sorted);

  const ModelConfig& c_;
  Ops& ops_;
  Comm& group_;
  Comm& run_;
  const int n_, me_, replicas_, replica_;  // N, this rank's group rank, D, its replica index
  const int64_t local_experts_;
  std::vector<Layer> layers_;  // by sparse index
  ExpertRows planned_, most_;
  Grown send_, recv_, act_, y_, d_act_, d_gate_up_, d_rows_;
};

}  // namespace anvil
