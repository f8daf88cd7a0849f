#include "train/trainer.h"

#include <chrono>
#include <algorithm>
#include <cmath>
#include <tuple>

#include "core/bf16.h"
#include "core/error.h"

namespace anvil {

namespace {

// Whether token i begins a sequence, or a document packed in one (TokenBatch::positions): no
// position predicts it, so the last token of one document never predicts the next's first.
bool starts_document(const TokenBatch& b, size_t i, int64_t seq_len) {
  return i % static_cast<size_t>(seq_len) == 0 || (i < b.positions.size() && b.positions[i] == 0);
}

// Target tokens of a micro-batch at the positions [begin, end) of each sequence (context
// parallel: this rank's slice; else all): labels (ids without them) other than -100 of
// tokens that do not start a sequence or document (position t predicts label t+1).
int64_t count_targets(const TokenBatch& b, int64_t seq_len, int64_t begin, int64_t end) {
  const std::vector<int64_t>& lab = b.labels.empty() ? b.ids : b.labels;
  int64_t n = 0;
  for (size_t i = 0; i < lab.size(); ++i) {
    const int64_t t = static_cast<int64_t>(i % static_cast<size_t>(seq_len));
    if (t > begin && t <= end && !starts_document(b, i, seq_len) && lab[i] != -100) ++n;
  }
  return n;
}

// Positions [begin, end) of each of the sequences of T tokens in v.
std::vector<int32_t> slice_of(const std::vector<int32_t>& v, int64_t T, int64_t begin, int64_t end) {
  if (begin == 0 && end == T) return v;
  std::vector<int32_t> out;
  out.reserve(v.size() / static_cast<size_t>(T) * static_cast<size_t>(end - begin));
  for (size_t s = 0; s < v.size(); s += static_cast<size_t>(T))
    out.insert(out.end(), v.begin() + static_cast<std::ptrdiff_t>(s) + begin,
               v.begin() + static_cast<std::ptrdiff_t>(s) + end);
  return out;
}

// The positions of a micro-batch as I32, checked: each sequence starts a document, and a
// position is 0 (a new document) or the one before it plus 1.
std::vector<int32_t> checked_positions(const TokenBatch& b, int64_t seq_len) {
  ANVIL_ENSURE(b.positions.size() == b.ids.size(), kInvalidInput, "a micro-batch has ", b.positions.size(),
               " positions for ", b.ids.size(), " tokens");
  std::vector<int32_t> out(b.positions.size());
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t t = static_cast<int64_t>(i % static_cast<size_t>(seq_len)), p = b.positions[i];
    ANVIL_ENSURE(p == 0 || (t > 0 && p == b.positions[i - 1] + 1), kInvalidInput, "position ", p, " of token ", t,
                 " of sequence ", static_cast<int64_t>(i) / seq_len,
                 " neither starts a document (0) nor follows the position before it; rebuild the block file");
    out[i] = static_cast<int32_t>(p);
  }
  return out;
}

// This rank's share of the experts (model/params.h; resolve_config checked the degree).
ExpertLayout expert_layout_of(const ParallelSection& p, Comm* comm) {
  if (p.expert_parallel == 1) return {};
  return ExpertLayout::of_rank(static_cast<int>(p.expert_parallel), comm->rank(), comm->world());
}

}  // namespace

Trainer::Trainer(const ModelConfig& config, const UnitReader& weights, const ResolvedConfig& settings, Comm* comm,
                 std::unique_ptr<Ops> ops)
    : config_(config), settings_(settings), comm_(comm),
      table_(config, comm ? comm->world() : 1, expert_layout_of(settings.config.parallel, comm)),
      ops_(std::move(ops)) {
  if (comm_) comm_->set_compute_stream(ops_->runtime().stream());
  const ParallelSection& p = settings_.config.parallel;
  const DataSection& d = settings_.config.data;
  ANVIL_ENSURE(p.mode != ParallelMode::kAuto && p.recompute != Recompute::kAuto && p.grad_dtype != GradDType::kAuto &&
                   d.seq_len > 0 && d.grad_accum >= 1,
               kInternal, "the Trainer takes a resolved config (train/resolve.h)");
  grad_dtype_ = p.grad_dtype == GradDType::kBF16 ? DType::kBF16 : DType::kF32;
  // Memory was planned (resolve_config) before anything is allocated.
  plan_ = plan_memory({config_, d, p, table_.world(), ops_->compute_dtype()});
  // Expert parallel: the group that exchanges tokens (ranks with this rank's replica index)
  // and the replicas of this rank's experts (docs/ARCHITECTURE.md, Expert parallelism).
  const ExpertLayout& xl = table_.expert_layout();
  Comm* expert_group = nullptr;
  if (xl.degree > 1) {
    const int D = xl.replicas(comm_->world());
    std::vector<int> group, replicas;
    for (int j = 0; j < xl.degree; ++j) group.push_back(j * D + xl.replica);
    for (int r = 0; r < D; ++r) replicas.push_back(xl.shard * D + r);
    if (xl.degree < comm_->world()) expert_group_ = comm_->group(group);
    if (D > 1) expert_replicas_ = comm_->group(replicas);
    expert_group = expert_group_ ? expert_group_.get() : comm_;
  }
  store_ = make_param_store(table_, *ops_, comm_, p.mode, grad_dtype_, expert_replicas_.get());
  store_->set_defer_sync(p.fsdp_defer_sync);
  store_->set_reduce_dtype(p.reduce_dtype);
  store_->load(weights);
  const int64_t cp = p.context_parallel;
  ANVIL_ENSURE(!dpo() || cp == 1, kUsage, "--objective dpo sums each completion's log-probs on one rank: "
               "--context-parallel is not supported with it yet");
  ANVIL_ENSURE(cp == 1 || (comm_ && comm_->world() == cp), kInternal, "context parallel ", cp, " on ",
               comm_ ? comm_->world() : 1, " ranks (resolve_config refuses it)");
  slice_ = {cp == 1 ? 0 : comm_->rank() * d.seq_len / cp, cp == 1 ? d.seq_len : (comm_->rank() + 1) * d.seq_len / cp};
  model_ = std::make_unique<Transformer>(config_, table_, *ops_, d.micro_batch, d.seq_len,
                                         ModelPolicies{p.recompute, p.mlp_tile, grad_dtype_, cp > 1 ? comm_ : nullptr,
                                                       p.fp8, p.offload_activations, expert_group,
                                                       expert_group ? comm_ : nullptr});
  ops_->reserve_workspaces(workspace_shape(config_, d.micro_batch, d.seq_len, cp, p.fp8));
  model_->set_forward_done_hook([this] {
    if (timing_) timing_result_.forward += lap();
  });
  const int64_t n = d.micro_batch * d.seq_len;
  auto make = [&](Shape s, DType dt) {
    Tensor t(nullptr, dt, s, ops_->runtime().device());
    t.data = ops_->runtime().alloc(t.bytes());
    buffers_.push_back(t.data);
    return t;
  };
  ids_ = make({n / cp}, DType::kI32);
  targets_ = make({n / cp}, DType::kI32);
  positions_ = make({n}, DType::kI32);
  loss_sum_ = make({1}, DType::kF32);
  if (dpo()) {
    token_losses_ = make({n}, DType::kF32);
    token_weights_ = make({n}, DType::kF32);
    weighted_sum_ = make({1}, DType::kF32);
  }
  // FSDP and zero2 across ranks: the norm's squares are summed over the ranks, and the
  // update zeroes the owned shards (the next reduce-scatters add into them).
  const bool sharded = store_->sharded();
  optimizer_ = std::make_unique<Optimizer>(*ops_, store_->owned(), make({1}, DType::kF32), sharded ? comm_ : nullptr,
                                           sharded);
  optimizer_->set_overlap(p.overlap_optimizer);
  if (xl.degree > 1) {  // each expert shard's squares once (its first replica's), summed over the ranks
    using Part = Optimizer::NormPart;
    std::vector<Part> parts;
    for (const UnitInfo& u : table_.units())
      parts.push_back(u.experts ? (xl.replica == 0 ? Part::kSummed : Part::kSkipped)
                                : (sharded ? Part::kSummed : Part::kLocal));
    optimizer_->set_norm_parts(comm_, std::move(parts));
  }
  store_->set_pending_updates(optimizer_.get());
}

Trainer::~Trainer() {
  // The optimizer goes before the store whose buffers it updates.
  model_.reset();
  store_->set_pending_updates(nullptr);
  optimizer_.reset();
  store_.reset();
  for (void* p : buffers_) ops_->runtime().release(p);
}

void Trainer::upload_batch(const TokenBatch& b) {
  const int64_t B = settings_.config.data.micro_batch, T = settings_.config.data.seq_len, n = B * T;
  ANVIL_ENSURE(static_cast<int64_t>(b.ids.size()) == n, kInvalidInput, "a micro-batch holds ", b.ids.size(),
               " tokens, expected ", B, " x ", T);
  ANVIL_ENSURE(b.labels.empty() || b.labels.size() == b.ids.size(), kInvalidInput, "labels and ids differ in length");
  const std::vector<int64_t>& lab = b.labels.empty() ? b.ids : b.labels;
  const std::vector<int32_t> positions = b.positions.empty() ? std::vector<int32_t>() : checked_positions(b, T);
  std::vector<int32_t> ids(static_cast<size_t>(n)), tgt(static_cast<size_t>(n));
  for (int64_t s = 0; s < B; ++s)
    for (int64_t t = 0; t < T; ++t) {
      const size_t i = static_cast<size_t>(s * T + t);
      const int64_t id = b.ids[i];
      ANVIL_ENSURE(id >= 0 && id < config_.vocab_size, kInvalidInput, "token id ", id, " (sequence ", s,
                   ", position ", t, ") is outside the vocabulary of ", config_.vocab_size);
      ids[i] = static_cast<int32_t>(id);
      const int64_t y = t + 1 < T && !starts_document(b, i + 1, T) ? lab[i + 1] : -100;
      ANVIL_ENSURE(y == -100 || (y >= 0 && y < config_.vocab_size), kInvalidInput, "label ", y,
                   " is outside the vocabulary");
      tgt[i] = static_cast<int32_t>(y);
    }
  ops_->runtime().upload(ids_, slice_of(ids, T, slice_.begin, slice_.end).data());
  ops_->runtime().upload(targets_, slice_of(tgt, T, slice_.begin, slice_.end).data());
  if (documents_of(b).positions.data) ops_->runtime().upload(positions_, positions.data());
}

// Without positions, or where every sequence is one document (positions 0..T-1, the same
// attention and RoPE), the model runs plain causal attention: the faster path. Otherwise the
// uploaded positions and the documents' lengths (for cuDNN's ragged attention).
Documents Trainer::documents_of(const TokenBatch& b) const {
  const int64_t T = settings_.config.data.seq_len;
  for (size_t i = 0; i < b.positions.size(); ++i)
    if (b.positions[i] != static_cast<int64_t>(i % static_cast<size_t>(T)))
      return Documents(positions_, document_lengths(b.positions));
  return Documents();
}

int64_t Trainer::step_count_of(const std::vector<TokenBatch>& micro_batches) {
  int64_t total = 0;
  for (const TokenBatch& b : micro_batches) total += dpo() ? static_cast<int64_t>(b.pairs.size()) : slice_targets(b);
  total = global_sum(total, dpo() ? "pairs" : "target tokens");
  ANVIL_ENSURE(total > 0, kInvalidInput, "step ", step_ + 1,
               dpo() ? " has no preference pair" : " has no target tokens (every label is -100)");
  return total;
}

void Trainer::dpo_forward_backward(const TokenBatch& b, int64_t pairs, DpoSums& sums) {
  const size_t n = b.ids.size();
  std::vector<float> losses(n), weights(n);
  const DpoSection& d = settings_.config.dpo;
  const TokenWeighting weighting{token_losses_, token_weights_, weighted_sum_, [&] {
    ops_->runtime().download(losses.data(), token_losses_);
    std::fill(weights.begin(), weights.end(), 0.0f);
    for (const PreferencePair& pair : b.pairs) {
      ANVIL_ENSURE(pair.index >= 0 && static_cast<size_t>(pair.index) < ref_chosen_.size(), kInternal, "pair ",
                   pair.index, " has no reference log-probs (", ref_chosen_.size(), " pairs)");
      const auto k = static_cast<size_t>(pair.index);
      const PairLogps lp = anvil::pair_logps(losses, b, pair, ref_chosen_[k], ref_rejected_[k]);
      const PairLoss l = dpo_pair_loss(d, lp);
      sums.add(d, lp, l.loss);
      // Token t's loss is -log p of token t + 1: the document's tokens but its last.
      for (const auto& [begin, length, dlogp] : {std::tuple{pair.chosen_begin, pair.chosen_length, l.d_chosen},
                                                 std::tuple{pair.rejected_begin, pair.rejected_length, l.d_rejected}})
        std::fill(weights.begin() + static_cast<std::ptrdiff_t>(begin),
                  weights.begin() + static_cast<std::ptrdiff_t>(begin + length - 1),
                  static_cast<float>(-dlogp / static_cast<double>(pairs)));
    }
    ops_->runtime().upload(token_weights_, weights.data());
  }};
  model_->forward_backward(*store_, ids_, targets_, 1.0f, loss_sum_, Tensor(), documents_of(b), &weighting);
}

void Trainer::add_router_stats(RouterStats& stats) {
  const Tensor t = model_->router_stats();
  std::vector<float> v(static_cast<size_t>(t.numel()));
  ops_->runtime().download(v.data(), t);
  stats.add(v, ids_.numel());
}

DpoSums Trainer::global_sums(const DpoSums& mine) {
  if (!comm_) return mine;
  std::vector<double> v = mine.values();
  for (double& x : v) x = comm_->host_sum(x, "dpo metrics");
  DpoSums all;
  all.loss = v[0], all.rewards_chosen = v[1], all.rewards_rejected = v[2], all.accuracies = v[3], all.margins = v[4];
  all.logps_chosen = v[5], all.logps_rejected = v[6], all.pairs = static_cast<int64_t>(v[7]);
  return all;
}

StepStats Trainer::step(const std::vector<TokenBatch>& micro_batches) {
  const TrainConfig& c = settings_.config;
  ANVIL_ENSURE(static_cast<int64_t>(micro_batches.size()) == c.data.grad_accum, kInternal, "a step of ",
               micro_batches.size(), " micro-batches; the trainer was set up for ", c.data.grad_accum);
  // The loss is normalised by the step's whole count of target tokens (dpo: pairs), so
  // accumulation gives the gradient of the mean over the step, not a mean of means.
  if (comm_) comm_->set_step(step_ + 1);  // named by any collective's error from here on
  const int64_t total = step_count_of(micro_batches);
  ops_->runtime().zero(loss_sum_);
  if (timing_) {
    timing_result_ = StepTiming{};
    lap();
  }
  DpoSums sums;
  RouterStats router(config_.sparse_layers(), config_.moe.num_experts);
  for (size_t i = 0; i < micro_batches.size(); ++i) {
    upload_batch(micro_batches[i]);
    store_->set_sync(i + 1 == micro_batches.size());  // DDP: no_sync before the last
    if (timing_) lap();  // the upload is not the model's time
    if (dpo())
      dpo_forward_backward(micro_batches[i], total, sums);
    else
      model_->forward_backward(*store_, ids_, targets_, 1.0f / static_cast<float>(total), loss_sum_, Tensor(),
                               documents_of(micro_batches[i]));
    if (timing_) timing_result_.backward += lap();
    if (config_.sparse_layers() > 0) add_router_stats(router);
  }
  if (timing_) {
    store_->finish_collectives();
    if (comm_) comm_->synchronize();
    timing_result_.communication = lap();
  }
  StepStats s;
  if (dpo()) {
    s.dpo = global_sums(sums);
    s.loss = s.dpo.loss / static_cast<double>(total);
  } else {
    float loss_sum = 0;
    ops_->runtime().download(&loss_sum, loss_sum_);
    s.loss = (comm_ ? comm_->host_sum(static_cast<double>(loss_sum), "loss") : loss_sum) / static_cast<double>(total);
  }
  s.target_tokens = total;
  if (config_.sparse_layers() > 0) s.router = router.global(comm_);
  ANVIL_ENSURE(std::isfinite(s.loss), kNumerics, "loss is ", s.loss, " at step ", step_ + 1,
               ": stopping before the update");
  ++step_;
  s.lr = lr_at(c.optim.schedule, step_, c.steps);
  store_->complete_grads();
  s.grad_norm = optimizer_->step(c.optim.adamw, step_, s.lr);
  store_->grads_applied();
  if (timing_) timing_result_.optimizer = lap();
  return s;
}

double Trainer::lap() {
  ops_->runtime().synchronize();
  const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  const double d = now - phase_start_;
  phase_start_ = now;
  return d;
}

int64_t Trainer::slice_targets(const TokenBatch& b) const {
  return count_targets(b, settings_.config.data.seq_len, slice_.begin, slice_.end);
}

int Trainer::data_world() const {
  return (comm_ ? comm_->world() : 1) / static_cast<int>(settings_.config.parallel.context_parallel);
}

int Trainer::data_rank() const {
  return (comm_ ? comm_->rank() : 0) / static_cast<int>(settings_.config.parallel.context_parallel);
}

int64_t Trainer::global_sum(int64_t local, const char* what) {
  return comm_ ? comm_->host_sum(local, what) : local;
}

double Trainer::loss_and_grads(const TokenBatch& batch, std::vector<float>* logits, DpoSums* sums) {
  store_->zero_grads();
  ops_->runtime().zero(loss_sum_);
  upload_batch(batch);
  const int64_t count = step_count_of({batch});
  Tensor lg;
  void* lg_buf = nullptr;
  if (logits) {
    lg = Tensor(nullptr, DType::kF32, {ids_.numel(), config_.vocab_size}, ops_->runtime().device());
    lg_buf = lg.data = ops_->runtime().alloc(lg.bytes());
  }
  DpoSums mine;
  if (dpo()) {
    ANVIL_ENSURE(!logits, kInternal, "dpo: no logits are kept");
    dpo_forward_backward(batch, count, mine);
  } else {
    model_->forward_backward(*store_, ids_, targets_, 1.0f / static_cast<float>(count), loss_sum_, lg,
                             documents_of(batch));
  }
  if (logits) {
    logits->resize(static_cast<size_t>(lg.numel()));
    ops_->runtime().download(logits->data(), lg);
    ops_->runtime().release(lg_buf);
  }
  if (dpo()) {
    const DpoSums all = global_sums(mine);
    if (sums) *sums = all;
    return all.loss / static_cast<double>(count);
  }
  float loss_sum = 0;
  ops_->runtime().download(&loss_sum, loss_sum_);
  return (comm_ ? comm_->host_sum(static_cast<double>(loss_sum), "loss") : loss_sum) / static_cast<double>(count);
}

void Trainer::set_reference(std::vector<double> chosen, std::vector<double> rejected) {
  ANVIL_ENSURE(chosen.size() == rejected.size(), kInternal, "reference log-probs of ", chosen.size(),
               " chosen and ", rejected.size(), " rejected completions");
  ref_chosen_ = std::move(chosen);
  ref_rejected_ = std::move(rejected);
}

std::vector<PairLogps> Trainer::pair_logps(const TokenBatch& batch) {
  ANVIL_ENSURE(dpo(), kInternal, "pair log-probs need --objective dpo");
  upload_batch(batch);
  ops_->runtime().zero(loss_sum_);
  model_->forward_loss(*store_, ids_, targets_, loss_sum_, documents_of(batch), token_losses_);
  store_->drop_kept_unit();  // no backward follows
  std::vector<float> losses(batch.ids.size());
  ops_->runtime().download(losses.data(), token_losses_);
  std::vector<PairLogps> out;
  for (const PreferencePair& pair : batch.pairs) out.push_back(anvil::pair_logps(losses, batch, pair, 0, 0));
  return out;
}

Trainer::LossSum Trainer::forward_loss(const TokenBatch& batch) {
  LossSum r;
  upload_batch(batch);
  r.tokens = slice_targets(batch);
  ops_->runtime().zero(loss_sum_);
  model_->forward_loss(*store_, ids_, targets_, loss_sum_, documents_of(batch));
  store_->drop_kept_unit();  // no backward follows
  float sum = 0;
  ops_->runtime().download(&sum, loss_sum_);
  r.sum = sum;
  return r;
}

HostUnits Trainer::whole_masters(const ParamTable& whole) {
  HostUnits mine = store_->download_masters();
  const ExpertLayout& xl = table_.expert_layout();
  if (xl.degree == 1) return mine;
  // Every rank's experts units through the host; each shard's from its first replica.
  const int W = comm_->world(), D = xl.replicas(W);
  std::vector<HostUnits> shards;
  for (int s = 0; s < xl.degree; ++s) shards.push_back(make_host_units(table_));
  for (size_t u = 0; u < table_.units().size(); ++u) {
    if (!table_.units()[u].experts) continue;
    const size_t n = mine[u].size();
    std::vector<float> all(static_cast<size_t>(W) * n);
    comm_->host_all_gather(mine[u].data(), n * sizeof(float), all.data(), "experts' masters");
    for (int s = 0; s < xl.degree; ++s)
      std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(s * D) * n), n,
                  shards[static_cast<size_t>(s)][u].begin());
  }
  HostUnits out = make_host_units(whole);
  for (int s = 0; s < xl.degree; ++s)  // their other units are zeros here: overwritten next
    copy_by_name(ParamTable(config_, W, ExpertLayout{xl.degree, s, 0}), shards[static_cast<size_t>(s)], whole, out);
  copy_by_name(table_, mine, whole, out);
  return out;
}

HostUnits Trainer::grads() const {
  ANVIL_ENSURE(!store_->sharded(), kInternal, "whole gradients are not kept in fsdp or zero2");
  HostUnits out;
  for (size_t u = 0; u < table_.units().size(); ++u) {
    Tensor g = store_->owned_grads()[u];
    out.emplace_back(static_cast<size_t>(g.numel()));
    if (g.dtype == DType::kF32) {
      ops_->runtime().download(out.back().data(), g);
      continue;
    }
    std::vector<uint16_t> bits(static_cast<size_t>(g.numel()));  // bf16 (param_store.h): widened exactly
    ops_->runtime().download(bits.data(), g);
    for (size_t i = 0; i < bits.size(); ++i) out.back()[i] = bf16_bits_to_f32(bits[i]);
  }
  return out;
}

}  // namespace anvil
