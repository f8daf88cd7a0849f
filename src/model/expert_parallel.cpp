// The experts' exchange among the ranks of an expert-parallel group (model/expert_parallel.h).
#include "model/expert_parallel.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"

namespace anvil {
namespace {

// A buffer's bytes as ExpertParallel::view allocates them (at least 256).
int64_t grown_bytes(int64_t numel, DType dtype) {
  return std::max<int64_t>(numel * static_cast<int64_t>(dtype_size(dtype)), 256);
}

}  // namespace

ExpertRows planned_expert_rows(const ModelConfig& c, int64_t tokens, int degree) {
  const int64_t N = degree, K = c.moe.top_k, most = tokens * std::min<int64_t>(K, c.moe.num_experts / N);
  const int64_t chunk = (tokens * K + N - 1) / N;  // balanced: n K / N from each member to each
  return {std::min(N * most, kExpertRowsMargin * tokens * K), std::min(most, kExpertRowsMargin * chunk)};
}

int64_t expert_parallel_bytes(const ModelConfig& c, int degree, ExpertRows rows, DType dtype) {
  const int64_t C = c.hidden_size, Im = c.moe.intermediate, El = c.moe.num_experts / degree, R = rows.local;
  const int64_t layer = grown_bytes(El + 1, DType::kI32) + grown_bytes(R * C, dtype) + grown_bytes(R * 2 * Im, dtype);
  return c.sparse_layers() * layer + 2 * grown_bytes(degree * rows.chunk * C, dtype) +  // send, receive
         2 * grown_bytes(R * Im, dtype) + 2 * grown_bytes(R * C, dtype) +             // act, d_act; y, d_rows
         grown_bytes(R * 2 * Im, dtype);                                                // d_gate_up
}

ExpertParallel::ExpertParallel(const ModelConfig& c, Ops& ops, Comm& group, Comm& run, const ExpertLayout& layout,
                               int64_t tokens)
    : c_(c),
      ops_(ops),
      group_(group),
      run_(run),
      n_(layout.degree),
      me_(layout.shard),
      replicas_(layout.replicas(run.world())),
      replica_(layout.replica),
      local_experts_(c.moe.num_experts / layout.degree),
      layers_(static_cast<size_t>(c.sparse_layers())) {
  ANVIL_ENSURE(group.world() == n_ && group.rank() == me_, kInternal, "expert-parallel group rank ", group.rank(),
               " of ", group.world(), " for shard ", me_, " of ", n_);
  planned_ = planned_expert_rows(c, tokens, n_);
  reserve(planned_);
}

void ExpertParallel::reserve(ExpertRows rows) {
  const int64_t C = c_.hidden_size, Im = c_.moe.intermediate, R = rows.local;
  const DType cd = ops_.compute_dtype();
  for (Layer& l : layers_) {
    view(l.local_offsets, {local_experts_ + 1}, DType::kI32);
    view(l.x, {R, C}, cd);
    view(l.gate_up, {R, 2 * Im}, cd);
  }
  for (Grown* g : {&send_, &recv_}) view(*g, {n_ * rows.chunk, C}, cd);
  for (Grown* g : {&act_, &d_act_}) view(*g, {R, Im}, cd);
  for (Grown* g : {&y_, &d_rows_}) view(*g, {R, C}, cd);
  view(d_gate_up_, {R, 2 * Im}, cd);
}

ExpertParallel::~ExpertParallel() {
  for (Layer& l : layers_)
    for (Grown* g : {&l.local_offsets, &l.x, &l.gate_up})
      if (g->data) ops_.runtime().release(g->data);
  for (Grown* g : {&send_, &recv_, &act_, &y_, &d_act_, &d_gate_up_, &d_rows_})
    if (g->data) ops_.runtime().release(g->data);
}

Tensor ExpertParallel::view(Grown& g, Shape shape, DType dtype) {
  const size_t bytes = std::max<size_t>(static_cast<size_t>(shape.numel()) * dtype_size(dtype), 256);
  if (bytes > g.bytes) {
    if (g.data) ops_.runtime().release(g.data);
    g.data = ops_.runtime().alloc(bytes);
    g.bytes = bytes;
  }
  return Tensor(g.data, dtype, shape, ops_.runtime().device());
}

void ExpertParallel::copy(Tensor out, int64_t out_row, Tensor in, int64_t in_row, int64_t rows) {
  if (rows == 0) return;
  const int64_t C = c_.hidden_size;
  ops_.runtime().copy_rows(tensor_at(out, out_row * C, {rows, C}), C, tensor_at(in, in_row * C, {rows, C}), C, rows, C);
}

int64_t ExpertParallel::start(const Layer& l, int j, int k) const {
  return l.offsets[static_cast<size_t>(j * (c_.moe.num_experts + 1) + k * local_experts_)];
}

int64_t ExpertParallel::count(const Layer& l, int j, int k) const { return start(l, j, k + 1) - start(l, j, k); }

int64_t ExpertParallel::within(const Layer& l, int j, int64_t e) const {
  return l.offsets[static_cast<size_t>(j * (c_.moe.num_experts + 1) + e)] - start(l, j, me_);
}

// Member k's chunk of the send buffer holds the sorted rows of k's experts; the rows received
// from member j are laid out expert by expert (local expert e: every member's rows of e, in
// member order, each in its sorted order).
void ExpertParallel::dispatch(const Layer& l, Tensor sorted, Tensor local) {
  const int64_t C = c_.hidden_size, R = l.chunk;
  const Tensor send = view(send_, {n_ * R, C}, sorted.dtype), recv = view(recv_, {n_ * R, C}, sorted.dtype);
  for (int k = 0; k < n_; ++k) copy(send, k * R, sorted, start(l, me_, k), count(l, me_, k));
  if (R > 0) group_.wait(group_.all_to_all(recv, send, "experts' rows"));
  int64_t row = 0;
  for (int64_t e = me_ * local_experts_; e < (me_ + 1) * local_experts_; ++e)
    for (int j = 0; j < n_; ++j) {
      const int64_t rows = within(l, j, e + 1) - within(l, j, e);
      copy(local, row, recv, j * R + within(l, j, e), rows);
      row += rows;
    }
  ANVIL_ASSERT(row == l.rows);
}

// The inverse of dispatch: the local rows back to their members, into their sorted rows.
void ExpertParallel::collect(const Layer& l, Tensor local, Tensor sorted) {
  const int64_t C = c_.hidden_size, R = l.chunk;
  const Tensor send = view(send_, {n_ * R, C}, local.dtype), recv = view(recv_, {n_ * R, C}, local.dtype);
  int64_t row = 0;
  for (int64_t e = me_ * local_experts_; e < (me_ + 1) * local_experts_; ++e)
    for (int j = 0; j < n_; ++j) {
      const int64_t rows = within(l, j, e + 1) - within(l, j, e);
      copy(send, j * R + within(l, j, e), local, row, rows);
      row += rows;
    }
  if (R > 0) group_.wait(group_.all_to_all(recv, send, "experts' outputs"));
  for (int k = 0; k < n_; ++k) copy(sorted, start(l, me_, k), recv, k * R, count(l, me_, k));
}

void ExpertParallel::forward(const BlockWeights& w, const Activations& a, int64_t layer) {
  using enum Activation;
  Layer& l = layers_[static_cast<size_t>(c_.sparse_index(layer))];
  const int64_t E = c_.moe.num_experts, C = c_.hidden_size, Im = c_.moe.intermediate, El = local_experts_;
  // Every rank's offsets (the whole run's: each group reads its members').
  std::vector<int32_t> mine(static_cast<size_t>(E + 1)), all(static_cast<size_t>(run_.world() * (E + 1)));
  ops_.runtime().download(mine.data(), a[kMoeOffsets]);
  run_.host_all_gather(mine.data(), mine.size() * sizeof(int32_t), all.data(), "experts' offsets");
  l.offsets.resize(static_cast<size_t>(n_ * (E + 1)));
  for (int j = 0; j < n_; ++j)
    std::copy_n(all.begin() + (j * replicas_ + replica_) * (E + 1), E + 1, l.offsets.begin() + j * (E + 1));
  l.chunk = 0;
  for (int j = 0; j < n_; ++j)
    for (int k = 0; k < n_; ++k) l.chunk = std::max(l.chunk, count(l, j, k));
  std::vector<int32_t> local_offsets(static_cast<size_t>(El + 1), 0);
  for (int64_t e = 0; e < El; ++e) {
    int64_t rows = 0;
    for (int j = 0; j < n_; ++j) rows += within(l, j, me_ * El + e + 1) - within(l, j, me_ * El + e);
    local_offsets[static_cast<size_t>(e + 1)] = static_cast<int32_t>(local_offsets[static_cast<size_t>(e)] + rows);
  }
  l.rows = local_offsets.back();
  note_rows(l);
  const Tensor offsets = view(l.local_offsets, {El + 1}, DType::kI32);
  ops_.runtime().upload(offsets, local_offsets.data());
  const DType cd = ops_.compute_dtype();
  const Tensor sorted = a[kMoeX].reshape({a[kMoeX].numel() / C, C});
  const Tensor x = view(l.x, {l.rows, C}, cd), gate_up = view(l.gate_up, {l.rows, 2 * Im}, cd);
  const Tensor act = view(act_, {l.rows, Im}, cd), y = view(y_, {l.rows, C}, cd);
  dispatch(l, sorted, x);
  if (l.rows > 0) {  // else this rank's experts have no rows (it still takes part in the exchange)
    ops_.moe_linear_forward(gate_up, x, w.experts_gate_up, offsets);
    ops_.swiglu_forward(act, gate_up);
    ops_.moe_linear_forward(y, act, w.experts_down, offsets);
  }
  collect(l, y, a[kMoeY].reshape({sorted.rows(), C}));
}

void ExpertParallel::note_rows(const Layer& l) {
  const bool within = most_.local <= planned_.local && most_.chunk <= planned_.chunk;
  most_ = {std::max(most_.local, l.rows), std::max(most_.chunk, l.chunk)};
  if (within && (most_.local > planned_.local || most_.chunk > planned_.chunk))
    log_warn("expert parallel: shard ", me_, " received ", most_.local, " rows for its experts (planned ",
             planned_.local, ") and ", most_.chunk, " in one member's chunk (planned ", planned_.chunk,
             "): the routing is past ", kExpertRowsMargin,
             " x the balanced count, so the exchange's buffers grow past the memory plan");
}

void ExpertParallel::backward(const BlockWeights& w, const BlockWeights& g, bool accumulate, const Activations& a,
                              int64_t layer) {
  using enum Activation;
  Layer& l = layers_[static_cast<size_t>(c_.sparse_index(layer))];
  const int64_t C = c_.hidden_size, Im = c_.moe.intermediate, El = local_experts_;
  const DType cd = ops_.compute_dtype();
  const Tensor offsets(l.local_offsets.data, DType::kI32, {El + 1}, ops_.runtime().device());
  const Tensor x(l.x.data, cd, {l.rows, C}, ops_.runtime().device());
  const Tensor gate_up(l.gate_up.data, cd, {l.rows, 2 * Im}, ops_.runtime().device());
  const Tensor sorted = a[kMoeDY].reshape({a[kMoeDY].numel() / C, C});
  const Tensor dy = view(d_rows_, {l.rows, C}, cd), act = view(act_, {l.rows, Im}, cd);
  const Tensor d_act = view(d_act_, {l.rows, Im}, cd), d_gate_up = view(d_gate_up_, {l.rows, 2 * Im}, cd);
  dispatch(l, sorted, dy);
  const Tensor dx = view(y_, {l.rows, C}, cd);  // d loss / d the local input rows
  if (l.rows > 0) {
    ops_.moe_linear_backward_input(d_act, dy, w.experts_down, offsets);
    ops_.swiglu_backward(d_gate_up, d_act, gate_up, act);
    ops_.moe_linear_backward_weight(g.experts_down, dy, act, offsets, accumulate);
    ops_.moe_linear_backward_weight(g.experts_gate_up, d_gate_up, x, offsets, accumulate);
    ops_.moe_linear_backward_input(dx, d_gate_up, w.experts_gate_up, offsets);
  } else if (!accumulate) {  // experts without rows: a zero gradient
    ops_.runtime().zero(g.experts_down);
    ops_.runtime().zero(g.experts_gate_up);
  }
  collect(l, dx, sorted);
}

}  // namespace anvil
