// The inference forward with a KV cache (see decoder.h).
#include "infer/decoder.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "core/bf16.h"
#include "core/error.h"

namespace anvil {
namespace {

// The first `rows` rows of a (capacity, ...) buffer, as (rows, cols).
Tensor first(const Tensor& t, int64_t rows) { return Tensor(t.data, t.dtype, {rows, t.cols()}, t.device); }

}  // namespace

// The cached attention of the rows of one forward (Buffers), in the layer set_layer names.
class Decoder::CachedAttention final : public BlockAttention {
 public:
  CachedAttention(const Decoder& d, const Buffers& b) : d_(d), b_(b) {}
  void set_layer(int64_t layer) { layer_ = static_cast<size_t>(layer); }

  Tensor forward(const BlockWeights& w, const Activations& a) override {
    using enum Activation;
    const ModelConfig& c = d_.c_;
    const int H = static_cast<int>(c.num_heads), KV = static_cast<int>(c.num_kv_heads);
    const int64_t R = a[kAtt].rows();
    const Tensor qkv = a[kQkv].reshape(a[kQkvRaw].shape);
    d_.ops_.qk_norm_rope_forward(qkv, a[kRstdQk], a[kQkvRaw], w.q_norm, w.k_norm, b_.cos, b_.sin, H, KV,
                                 static_cast<float>(c.rms_norm_eps));
    d_.ops_.attention_cached(a[kAtt].reshape({R, H, c.head_dim}), qkv, d_.k_cache_[layer_], d_.v_cache_[layer_],
                             b_.slots, b_.positions, H, KV);
    return a[kAtt];
  }

 private:
  const Decoder& d_;
  const Buffers& b_;
  size_t layer_ = 0;
};

// ---- ResidentWeights

ResidentWeights::ResidentWeights(const ParamTable& table, Ops& ops, const std::vector<std::vector<float>>& units)
    : ops_(ops) {
  const DType cd = ops.compute_dtype();
  std::vector<uint16_t> bits;
  for (size_t u = 0; u < table.units().size(); ++u) {
    const std::vector<float>& src = units[u];
    Tensor t(nullptr, cd, {static_cast<int64_t>(src.size())}, ops.runtime().device());
    t.data = ops.runtime().alloc(t.bytes());
    units_.push_back(t);
    bytes_ += static_cast<int64_t>(t.bytes());
    if (cd == DType::kF32) {
      ops.runtime().upload(t, src.data());
    } else {
      ANVIL_ENSURE(cd == DType::kBF16, kInternal, "resident weights: compute dtype ", dtype_name(cd));
      bits.resize(src.size());
      for (size_t i = 0; i < src.size(); ++i) bits[i] = f32_to_bf16_bits(src[i]);
      ops.runtime().upload(t, bits.data());
    }
  }
}

ResidentWeights::~ResidentWeights() {
  for (Tensor& t : units_) ops_.runtime().release(t.data);
}

Tensor ResidentWeights::grads(int) { raise(ErrorKind::kInternal, "inference weights have no gradients"); }

// ---- Decoder

Decoder::Decoder(const ModelConfig& config, const ParamTable& table, Ops& ops, UnitSource& weights)
    : c_(config), table_(table), ops_(ops), weights_(weights), cd_(ops.compute_dtype()),
      inv_freq_(rope_inv_freq(config)), linears_(ops, Fp8Recipe::kOff, no_slots_),
      untiled_(ops, linears_, std::numeric_limits<int64_t>::max()), block_(config, ops, linears_, untiled_) {}

Decoder::~Decoder() {
  ops_.runtime().drop_recordings();
  free_all(cache_buffers_);
  free_all(row_buffers_);
}

void Decoder::free_all(std::vector<void*>& owner) {
  for (void* p : owner) ops_.runtime().release(p);
  owner.clear();
}

Tensor Decoder::make(Shape shape, DType dtype, std::vector<void*>& owner) {
  Tensor t(nullptr, dtype, shape, ops_.runtime().device());
  t.data = ops_.runtime().alloc(t.bytes());
  owner.push_back(t.data);
  return t;
}

int64_t Decoder::cache_bytes() const {
  return 2 * c_.num_layers * slots_ * c_.num_kv_heads * positions_ * c_.head_dim *
         static_cast<int64_t>(dtype_size(cd_));
}

void Decoder::reserve_cache(int64_t slots, int64_t positions) {
  ANVIL_ENSURE(slots >= 1 && positions >= 1, kInternal, "reserve_cache(", slots, ", ", positions, ")");
  if (slots <= slots_ && positions <= positions_) return;
  // Recordings hold the old pointers; the shape of the cache is part of every kernel.
  ops_.runtime().synchronize();
  ops_.runtime().drop_recordings();
  seen_.clear();
  free_all(cache_buffers_);
  k_cache_.clear();
  v_cache_.clear();
  slots_ = std::max(slots, slots_);
  positions_ = std::max(positions, positions_);
  for (int64_t l = 0; l < c_.num_layers; ++l) {
    k_cache_.push_back(make({slots_, c_.num_kv_heads, positions_, c_.head_dim}, cd_, cache_buffers_));
    v_cache_.push_back(make({slots_, c_.num_kv_heads, positions_, c_.head_dim}, cd_, cache_buffers_));
  }
}

void Decoder::reserve_rows(int64_t rows, int64_t outputs) {
  if (rows <= rows_cap_ && outputs <= outputs_cap_) return;
  ops_.runtime().synchronize();
  ops_.runtime().drop_recordings();
  seen_.clear();
  free_all(row_buffers_);
  rows_cap_ = std::max(rows, rows_cap_);
  outputs_cap_ = std::max(outputs, outputs_cap_);
  const int64_t R = rows_cap_, n = outputs_cap_, C = c_.hidden_size, hd = c_.head_dim;
  const DType F = DType::kF32;
  staging_ = make({rope_at(R, n) + R * hd}, DType::kI32, row_buffers_);
  acts_ = Activations();
  for (const ActivationBuffer& b : decode_buffers(c_, R, cd_)) acts_[b.what] = make(b.shape, b.dtype, row_buffers_);
  last_ = make({n, C}, cd_, row_buffers_);
  last_norm_ = make({n, C}, cd_, row_buffers_);
  last_rstd_ = make({n}, F, row_buffers_);
  logits_ = make({n, c_.vocab_size}, F, row_buffers_);
  argmax_ = make({n}, DType::kI32, row_buffers_);
}

Activations Decoder::rows_of(int64_t rows) const {
  Activations a;
  for (size_t k = 0; k < kActivationKinds; ++k) {
    const Tensor& t = acts_[static_cast<Activation>(k)];
    Shape shape = t.shape;
    if (rows_first(static_cast<Activation>(k))) shape.dims[0] = rows;
    if (t.data) a[static_cast<Activation>(k)] = Tensor(t.data, t.dtype, shape, t.device);
  }
  a[Activation::kH2] = a[Activation::kH1];
  a[Activation::kRstd2] = a[Activation::kRstd1];
  return a;
}

// Where the RoPE tables start in the staging buffer, after the 3R + n ids: at a multiple
// of 4 elements, so that the kernels' 8- and 16-byte loads of cos and sin are aligned
// (head_dim / 2 is even, so sin, R * head_dim / 2 further, is aligned too).
int64_t Decoder::rope_at(int64_t R, int64_t n) { return (3 * R + n + 3) / 4 * 4; }

// Packs the rows' ids, slots, positions, output rows and RoPE angles into one host buffer
// and uploads it: one transfer per forward. The RoPE tables have one row per token (the
// qk-norm-RoPE op reads row r's angles at r % T, T = R here), computed as Transformer does.
Decoder::Buffers Decoder::upload(const DecodeRows& rows) {
  const int64_t R = static_cast<int64_t>(rows.ids.size()), n = static_cast<int64_t>(rows.outputs.size());
  const int64_t half = c_.head_dim / 2;
  const int64_t at = rope_at(R, n);
  std::vector<int32_t> host(static_cast<size_t>(at + 2 * R * half));
  int32_t* ip = host.data();
  std::memcpy(ip, rows.ids.data(), static_cast<size_t>(R) * 4);
  std::memcpy(ip + R, rows.slots.data(), static_cast<size_t>(R) * 4);
  std::memcpy(ip + 2 * R, rows.positions.data(), static_cast<size_t>(R) * 4);
  std::memcpy(ip + 3 * R, rows.outputs.data(), static_cast<size_t>(n) * 4);
  float* cs = reinterpret_cast<float*>(ip + at);
  float* sn = cs + R * half;
  for (int64_t r = 0; r < R; ++r)
    rope_row(c_, inv_freq_, rows.positions[static_cast<size_t>(r)], cs + r * half, sn + r * half);
  ops_.runtime().upload(tensor_at(staging_, 0, {static_cast<int64_t>(host.size())}), host.data());
  Buffers b;
  b.ids = tensor_at(staging_, 0, {R});
  b.slots = tensor_at(staging_, R, {R});
  b.positions = tensor_at(staging_, 2 * R, {R});
  b.outputs = tensor_at(staging_, 3 * R, {n});
  const Tensor f(staging_.data, DType::kF32, staging_.shape, staging_.device);
  b.cos = tensor_at(f, at, {R, half});
  b.sin = tensor_at(f, at + R * half, {R, half});
  return b;
}

void Decoder::run(const Buffers& b, int64_t R, int64_t n, bool greedy) {
  const int64_t L = c_.num_layers;
  const float eps = static_cast<float>(c_.rms_norm_eps);
  const Activations a = rows_of(R);
  const Tensor x = a[Activation::kResidual];
  const int embed = table_.embed_unit();
  ops_.embedding_forward(x, b.ids, table_.unit_tensor(embed, weights_.weights(embed)));
  weights_.release(embed);
  CachedAttention attention(*this, b);
  Tensor w = weights_.weights(table_.block_unit(0));
  for (int64_t l = 0; l < L; ++l) {
    // The stream in place: block l + 1's attention norm is fused with block l's last add.
    NormFusion fusion{l > 0, Tensor()};
    const Tensor next = l + 1 < L ? weights_.weights(table_.block_unit(l + 1)) : Tensor();
    if (next.data) fusion.next_norm = table_.block_weights(l + 1, next).attn_norm;
    attention.set_layer(l);
    block_.forward(table_.block_weights(l, w), attention, a, x, x, fusion);
    weights_.release(table_.block_unit(l));
    w = next;
  }
  // The rows that need logits: gathered (an embedding lookup into x), normed, projected.
  const Tensor last = first(last_, n), last_norm = first(last_norm_, n);
  const Tensor last_rstd(last_rstd_.data, DType::kF32, {n}, last_rstd_.device);
  ops_.embedding_forward(last, b.outputs, x);
  const int norm = table_.norm_unit(), head = table_.lm_head_unit();
  ops_.rmsnorm_forward(last_norm, last_rstd, last, table_.unit_tensor(norm, weights_.weights(norm)), eps);
  weights_.release(norm);
  ops_.linear_forward(first(logits_, n), last_norm, table_.unit_tensor(head, weights_.weights(head)), Tensor());
  weights_.release(head);
  if (greedy) ops_.argmax_rows(tensor_at(argmax_, 0, {n}), first(logits_, n));
}

void Decoder::forward(const DecodeRows& rows, std::vector<float>& logits) {
  compute(rows, false);
  const int64_t n = static_cast<int64_t>(rows.outputs.size());
  logits.resize(static_cast<size_t>(n * c_.vocab_size));
  ops_.runtime().download(logits.data(), first(logits_, n));
}

void Decoder::forward_greedy(const DecodeRows& rows, std::vector<int32_t>& ids) {
  compute(rows, true);
  ids.resize(rows.outputs.size());
  ops_.runtime().download(ids.data(), tensor_at(argmax_, 0, {static_cast<int64_t>(ids.size())}));
}

void Decoder::compute(const DecodeRows& rows, bool greedy) {
  const int64_t R = static_cast<int64_t>(rows.ids.size()), n = static_cast<int64_t>(rows.outputs.size());
  ANVIL_ENSURE(R >= 1 && n >= 1 && rows.slots.size() == rows.ids.size() && rows.positions.size() == rows.ids.size(),
               kInternal, "decoder forward: ", R, " rows, ", n, " outputs");
  ANVIL_ENSURE(slots_ > 0, kInternal, "decoder forward before reserve_cache");
  for (int64_t r = 0; r < R; ++r) {
    const int32_t id = rows.ids[static_cast<size_t>(r)];
    ANVIL_ENSURE(id >= 0 && id < c_.vocab_size, kInvalidInput, "token id ", id, " is outside the vocabulary of ",
                 c_.vocab_size);
    ANVIL_ENSURE(rows.slots[static_cast<size_t>(r)] >= 0 && rows.slots[static_cast<size_t>(r)] < slots_ &&
                     rows.positions[static_cast<size_t>(r)] >= 0 &&
                     rows.positions[static_cast<size_t>(r)] < positions_,
                 kInternal, "decoder row ", r, " is outside the cache");
  }
  for (int32_t o : rows.outputs) ANVIL_ENSURE(o >= 0 && o < R, kInternal, "decoder output row ", o, " of ", R);
  reserve_rows(R, n);
  const Buffers b = upload(rows);
  // A shape seen before is recorded on its second call and replayed from then on: the
  // decode step of a batch. (The views of b depend only on R and n, so they are the same.)
  // Not a MoE model: its experts' GEMMs read their row counts on the host (ops/cuda/moe_ops.cpp).
  const bool can = recording_ && ops_.runtime().can_record() && c_.sparse_layers() == 0;
  const auto key = std::make_tuple(R, n, greedy);
  auto it = seen_.find(key);
  if (!can || it == seen_.end()) {
    // A forward run directly may grow the backend's scratch memory, which recordings
    // point into: they are dropped first (the next batch's prefill drops the last decode's).
    if (can && !seen_.empty()) {
      ops_.runtime().drop_recordings();
      seen_.clear();
    }
    run(b, R, n, greedy);
    if (can) seen_[key] = -1;
  } else {
    if (it->second < 0) {
      ops_.runtime().begin_recording();
      run(b, R, n, greedy);
      it->second = ops_.runtime().end_recording();
    }
    ops_.runtime().replay(it->second);
  }
}

}  // namespace anvil
