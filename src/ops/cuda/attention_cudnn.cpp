// cuDNN's fused attention through the cudnn-frontend graph API (attention_cudnn.h).
//
// One graph per (shape, direction): q, k, v as (B, heads, T, hd) tensors whose strides walk
// the packed qkv (token stride (H + 2KV) hd, head stride hd), out and dout as (B, H, T, hd)
// views of (B, T, H, hd), Stats (B, H, T, 1) packed, which is our lse buffer as it is. Each
// graph is built once (finish()); execute() then only binds the pointers of the call.
// Packed documents (ragged graphs, one per group of ops/attention_ragged.h): the same views
// with (entries, padded length) for (B, T), each entry placed by ragged offsets (elements:
// the document's first token times the token stride; in lse, its sequence's block plus the
// token, lse's strides kept), the documents' lengths as a padding mask; the index arrays
// reach the device as kernel parameters at each call (param_upload.h).
//
// The frontend runs in its dynamic-loading mode: libcudnn.so.9 is opened with dlopen on
// first use (so the binary starts, and attention runs on the kernel, where cuDNN is
// absent), as is NVRTC for the frontend's own engines, which attention does not use. The
// frontend would also reach the CUDA runtime through a dlopen'd libcudart.so.12/13; the
// graphs are given the GPU's compute capability so that building them asks the runtime
// nothing; executing asks it only on cuDNN up to 9.15 at lengths not a multiple of 128
// (a padding-mask workaround copies the lengths), and where that library cannot be loaded
// those shapes run on the kernel.
#include "ops/cuda/attention_cudnn.h"

#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "ops/attention_scratch.h"
#include "ops/cuda/param_upload.h"

#ifndef ANVIL_HAVE_CUDNN
#define ANVIL_HAVE_CUDNN 0
#endif
#if ANVIL_HAVE_CUDNN
#include <cudnn.h>
#include <cudnn_frontend.h>

// The frontend's dynamic-loading mode reads libcudnn's symbols through this handle.
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend
#endif

namespace anvil::cuda {

namespace {
std::atomic<int64_t> g_forward_runs{0}, g_backward_runs{0};
}  // namespace

AttentionImpl parse_attention_impl(const std::string& value) {
  for (AttentionImpl i : {AttentionImpl::kCudnn, AttentionImpl::kCudnnDeterministic, AttentionImpl::kCudnnForward,
                          AttentionImpl::kCudnnNondeterministic, AttentionImpl::kKernel})
    if (value == attention_impl_name(i)) return i;
  raise(ErrorKind::kUsage, "ANVIL_ATTENTION=", value,
        ": expected cudnn (the default), cudnn-deterministic, cudnn-forward, cudnn-nondeterministic or kernel");
}

const char* attention_impl_name(AttentionImpl impl) {
  switch (impl) {
    case AttentionImpl::kCudnn: return "cudnn";
    case AttentionImpl::kCudnnDeterministic: return "cudnn-deterministic";
    case AttentionImpl::kCudnnForward: return "cudnn-forward";
    case AttentionImpl::kCudnnNondeterministic: return "cudnn-nondeterministic";
    case AttentionImpl::kKernel: return "kernel";
  }
  return "?";
}

bool cudnn_attention_built() { return ANVIL_HAVE_CUDNN != 0; }

CudnnAttentionCounts cudnn_attention_counts() { return {g_forward_runs.load(), g_backward_runs.load()}; }

#if ANVIL_HAVE_CUDNN

namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;
using Dims = std::vector<int64_t>;

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSeqLen, kOffQkv, kOffO, kOffStats };

void ok(fe::error_t status, const char* step) {
  if (status.is_bad()) throw std::runtime_error(cat(step, ": ", status.get_message()));
}

void cudnn_ok(cudnnStatus_t status, const char* what) {
  if (status != CUDNN_STATUS_SUCCESS) throw std::runtime_error(cat(what, ": ", fe::detail::get_error_string(status)));
}

// libcudnn.so.9, opened once for the process; false, with the reason, where it cannot be.
bool load_cudnn(std::string* why) {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    void* handle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      const char* e = dlerror();
      error = cat("cannot load libcudnn.so.9: ", e ? e : "unknown error");
      return;
    }
    cudnn_frontend::cudnn_dlhandle = handle;
  });
  if (!cudnn_frontend::cudnn_dlhandle) *why = error;
  return cudnn_frontend::cudnn_dlhandle != nullptr;
}

// (B, heads, T, hd) over a token-major buffer holding `width` heads per token.
Dims view_dims(const AttentionShape& s, int64_t heads) { return {s.batch, heads, s.seq, s.head_dim}; }
Dims view_strides(const AttentionShape& s, int64_t width) {
  const int64_t token = width * s.head_dim;
  return {s.seq * token, s.head_dim, token, 1};
}

TensorPtr tensor(fe::graph::Graph& g, const char* name, int64_t uid, Dims dims, Dims strides,
                 fe::DataType_t type = fe::DataType_t::BFLOAT16) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(std::move(dims))
                      .set_stride(std::move(strides))
                      .set_data_type(type));
}

void set_output(const TensorPtr& t, int64_t uid, Dims dims, Dims strides,
                fe::DataType_t type = fe::DataType_t::BFLOAT16) {
  t->set_output(true).set_uid(uid).set_dim(std::move(dims)).set_stride(std::move(strides)).set_data_type(type);
}

std::shared_ptr<fe::graph::Graph> new_graph(int sm) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_sm_version(sm);  // before any node: each node copies the graph's context
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// One graph: the dense call's (s: its B x T), or a ragged group's (s: its entries x padded
// length; packed_seq: the call's T, the sequence length of lse's (B, H, T) layout).
struct GraphSpec {
  AttentionShape s;
  bool backward = false;
  int64_t packed_batch = 0, packed_seq = 0;  // ragged: the call's B and T; 0: dense
  bool ragged() const { return packed_seq > 0; }
  int64_t lse_seq() const { return ragged() ? packed_seq : s.seq; }
  int64_t bound() const {  // the memory plan's bound of the call
    return ragged() ? attention_scratch_bytes(packed_batch, packed_seq, s.n_heads, s.n_kv_heads, s.head_dim)
                    : attention_scratch_bytes(s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim);
  }
};

// The index tensors of a ragged graph: the entries' lengths (the padding mask's) and the
// element offsets of each entry's first token in qkv (also dqkv), in out (also dout), and in
// lse. Null in a dense graph.
struct RaggedIndex {
  TensorPtr lengths, qkv, out, lse;
};
TensorPtr index_tensor(fe::graph::Graph& g, const char* name, int64_t uid, int64_t n) {
  return tensor(g, name, uid, {n, 1, 1, 1}, {1, 1, 1, 1}, fe::DataType_t::INT32);
}
RaggedIndex ragged_index(fe::graph::Graph& g, const GraphSpec& spec) {
  if (!spec.ragged()) return {};
  const int64_t n = spec.s.batch;
  return {index_tensor(g, "seq_len", kSeqLen, n), index_tensor(g, "qkv_offsets", kOffQkv, n + 1),
          index_tensor(g, "out_offsets", kOffO, n + 1), index_tensor(g, "lse_offsets", kOffStats, n + 1)};
}
void set_ragged(const TensorPtr& t, const TensorPtr& offsets) {
  if (offsets) t->set_ragged_offset(offsets);
}

// q, k and v: views into the packed qkv.
struct Inputs {
  TensorPtr q, k, v;
};
Inputs qkv_inputs(fe::graph::Graph& g, const AttentionShape& s, const RaggedIndex& r) {
  const int64_t width = s.n_heads + 2 * s.n_kv_heads;
  Inputs in{tensor(g, "Q", kQ, view_dims(s, s.n_heads), view_strides(s, width)),
            tensor(g, "K", kK, view_dims(s, s.n_kv_heads), view_strides(s, width)),
            tensor(g, "V", kV, view_dims(s, s.n_kv_heads), view_strides(s, width))};
  for (const TensorPtr& t : {in.q, in.k, in.v}) set_ragged(t, r.qkv);
  return in;
}
// lse (B, H, T) as cuDNN's Stats: (entries, H, padded, 1) with lse's head and token strides,
// each entry at its document's first token (ragged) or its sequence (dense).
Dims stats_dims(const GraphSpec& spec) { return {spec.s.batch, spec.s.n_heads, spec.s.seq, 1}; }
Dims stats_strides(const GraphSpec& spec) {
  const int64_t T = spec.lse_seq();
  return {spec.s.n_heads * T, T, 1, 1};
}

float attention_scale(const AttentionShape& s) { return 1.0f / std::sqrt(static_cast<float>(s.head_dim)); }

// Validated, lowered, planned by cuDNN's heuristics (mode A; engines whose workspace is over
// the memory plan's bound are passed over), support-checked and built.
void finish(fe::graph::Graph& g, const GraphSpec& spec, cudnnHandle_t handle) {
  g.deselect_workspace_greater_than(spec.bound());
  ok(g.validate(), "validate");
  ok(g.build_operation_graph(handle), "build_operation_graph");
  ok(g.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  ok(g.check_support(handle), "check_support");
  ok(g.build_plans(handle), "build_plans");
}

std::shared_ptr<fe::graph::Graph> build_forward(const GraphSpec& spec, int sm, cudnnHandle_t handle) {
  const AttentionShape& s = spec.s;
  auto g = new_graph(sm);
  const RaggedIndex r = ragged_index(*g, spec);
  const Inputs in = qkv_inputs(*g, s, r);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("attention_forward")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(attention_scale(s));
  if (spec.ragged()) options.set_padding_mask(true).set_seq_len_q(r.lengths).set_seq_len_kv(r.lengths);
  auto [o, stats] = g->sdpa(in.q, in.k, in.v, options);
  set_output(o, kO, view_dims(s, s.n_heads), view_strides(s, s.n_heads));
  set_output(stats, kStats, stats_dims(spec), stats_strides(spec), fe::DataType_t::FLOAT);
  set_ragged(o, r.out);
  set_ragged(stats, r.lse);
  finish(*g, spec, handle);
  return g;
}

std::shared_ptr<fe::graph::Graph> build_backward(const GraphSpec& spec, bool deterministic, int sm,
                                                 cudnnHandle_t handle) {
  const AttentionShape& s = spec.s;
  auto g = new_graph(sm);
  const RaggedIndex r = ragged_index(*g, spec);
  const Inputs in = qkv_inputs(*g, s, r);
  const int64_t width = s.n_heads + 2 * s.n_kv_heads;
  TensorPtr o = tensor(*g, "O", kO, view_dims(s, s.n_heads), view_strides(s, s.n_heads));
  TensorPtr dout = tensor(*g, "dO", kDO, view_dims(s, s.n_heads), view_strides(s, s.n_heads));
  TensorPtr stats = tensor(*g, "Stats", kStats, stats_dims(spec), stats_strides(spec), fe::DataType_t::FLOAT);
  set_ragged(o, r.out);
  set_ragged(dout, r.out);
  set_ragged(stats, r.lse);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_backward")
                     .set_causal_mask(true)
                     .set_attn_scale(attention_scale(s))
                     .set_deterministic_algorithm(deterministic);
  if (spec.ragged()) options.set_padding_mask(true).set_seq_len_q(r.lengths).set_seq_len_kv(r.lengths);
  auto [dq, dk, dv] = g->sdpa_backward(in.q, in.k, in.v, o, dout, stats, options);
  set_output(dq, kDQ, view_dims(s, s.n_heads), view_strides(s, width));
  set_output(dk, kDK, view_dims(s, s.n_kv_heads), view_strides(s, width));
  set_output(dv, kDV, view_dims(s, s.n_kv_heads), view_strides(s, width));
  for (const TensorPtr& t : {dq, dk, dv}) set_ragged(t, r.qkv);
  finish(*g, spec, handle);
  return g;
}

std::string shape_text(const GraphSpec& spec) {
  const AttentionShape& s = spec.s;
  return cat(spec.backward ? "backward" : "forward", " of ",
             spec.ragged() ? cat(s.batch, " documents of up to ", s.seq, " tokens")
                           : cat("batch ", s.batch, " x ", s.seq, " tokens"),
             ", ", s.n_heads, "/", s.n_kv_heads, " heads of ", s.head_dim);
}

// The index arrays of a ragged call, one block per group (each array 16-byte aligned):
// lengths, then the qkv, out and lse offsets (ragged_index) of each entry and the group's end.
struct RaggedArrays {
  std::vector<int32_t> values;
  struct At {
    int64_t lengths, qkv, out, lse;
  };
  std::vector<At> at;  // per group
};
void append_array(std::vector<int32_t>& values, const std::vector<int64_t>& array) {
  for (int64_t v : array) values.push_back(static_cast<int32_t>(v));
  values.resize((values.size() + 3) / 4 * 4, 0);
}
RaggedArrays ragged_arrays(const AttentionShape& s, const std::vector<RaggedGroup>& groups) {
  const int64_t width = (s.n_heads + 2 * s.n_kv_heads) * s.head_dim, out_width = s.n_heads * s.head_dim;
  RaggedArrays a;
  for (const RaggedGroup& g : groups) {
    std::vector<int64_t> qkv, out, lse;
    for (size_t e = 0; e <= g.starts.size(); ++e) {
      const int64_t start = e < g.starts.size() ? g.starts[e] : g.starts.back() + g.lengths.back();
      qkv.push_back(start * width);
      out.push_back(start * out_width);
      lse.push_back(start / s.seq * s.n_heads * s.seq + start % s.seq);
    }
    RaggedArrays::At at;
    at.lengths = static_cast<int64_t>(a.values.size());
    append_array(a.values, std::vector<int64_t>(g.lengths.begin(), g.lengths.end()));
    at.qkv = static_cast<int64_t>(a.values.size());
    append_array(a.values, qkv);
    at.out = static_cast<int64_t>(a.values.size());
    append_array(a.values, out);
    at.lse = static_cast<int64_t>(a.values.size());
    append_array(a.values, lse);
    a.at.push_back(at);
  }
  return a;
}
int64_t arrays_bytes(const RaggedArrays& a) { return (static_cast<int64_t>(a.values.size()) * 4 + 255) / 256 * 256; }

}  // namespace

struct CudnnAttention::Impl {
  struct Plan {
    std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN does not run this shape
    int64_t workspace = -1;
  };
  using Key = std::tuple<int64_t, int64_t, int, int, int, bool, int64_t, int64_t>;

  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  int sm = 0;  // compute capability, major * 10 + minor
  AttentionImpl impl = AttentionImpl::kCudnn;
  std::map<Key, Plan> plans;
  std::set<Key> prepared;  // call shapes whose ragged graphs are built (build_ragged_graphs)

  ~Impl() {
    plans.clear();
    if (handle) (void)fe::detail::destroy_handle(handle);
  }

  Plan& plan(const GraphSpec& spec) {
    const AttentionShape& s = spec.s;
    const bool backward = spec.backward;
    const Key key{s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim, backward, spec.packed_batch, spec.packed_seq};
    if (auto it = plans.find(key); it != plans.end()) return it->second;
    Plan p;
    const bool within = spec.ragged() || cudnn_backward_within_bound(s.batch, s.seq, s.n_heads);
    if (backward && !within && impl != AttentionImpl::kCudnnNondeterministic) past_the_bound_note(spec);
    if (backward && !within && impl == AttentionImpl::kCudnnDeterministic)
      return plans.emplace(key, std::move(p)).first->second;
    try {
      const bool deterministic = within && impl != AttentionImpl::kCudnnNondeterministic;
      p.graph = backward ? build_backward(spec, deterministic, sm, handle) : build_forward(spec, sm, handle);
      ok(p.graph->get_workspace_size(p.workspace), "get_workspace_size");
      const int64_t bound = spec.bound();
      if (p.workspace > bound)
        throw std::runtime_error(cat("its workspace of ", p.workspace, " bytes is more than the memory plan's ", bound));
    } catch (const std::exception& e) {
      p = Plan{};
      log_warn("attention: cuDNN cannot run the ", shape_text(spec), " (", e.what(),
               "); anvil's kernel runs it");
    }
    return plans.emplace(key, std::move(p)).first->second;
  }

  // What runs a dense backward whose deterministic dP is over the bound, said once per shape.
  void past_the_bound_note(const GraphSpec& spec) const {
    const AttentionShape& s = spec.s;
    const std::string why = cat("cuDNN's deterministic backward would keep dP, ",
                                cudnn_dp_bytes(s.batch, s.seq, s.n_heads) >> 20, " MiB, over the ",
                                kCudnnDpBound >> 20, " MiB bound (ops/attention_scratch.h)");
    const int64_t scratch = attention_scratch_bytes(s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim) >> 20;
    if (impl == AttentionImpl::kCudnnDeterministic)
      log_info("attention: the ", shape_text(spec), " runs anvil's kernel (fp32 dK/dV partials, ", scratch,
               " MiB): ", why, "; ANVIL_ATTENTION=cudnn runs cuDNN's non-deterministic backward there, about twice "
               "as fast");
    else
      log_info("attention: the ", shape_text(spec), " runs cuDNN's non-deterministic backward (within ", scratch,
               " MiB): ", why, "; runs at this length do not repeat bit for bit (ANVIL_ATTENTION=cudnn-deterministic: "
               "anvil's kernel, about half as fast)");
  }

  bool run(const GraphSpec& spec, std::unordered_map<int64_t, void*>& pack, void* workspace) {
    Plan& p = plan(spec);
    if (!p.graph) return false;
    std::string error;
    try {
      fe::error_t status = p.graph->execute(handle, pack, workspace);
      if (status.is_bad()) error = status.get_message();
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (error.empty()) return true;
    log_warn("attention: cuDNN failed to run the ", shape_text(spec), " (", error,
             "); anvil's kernel runs it from now on");
    p = Plan{};
    return false;
  }

  // Every graph ragged_groups may ask of calls of `s`, at the first such call (attention_ragged.h).
  void build_ragged_graphs(const AttentionShape& s, bool backward) {
    if (!prepared.insert(Key{s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim, backward, 0, 0}).second) return;
    const auto t0 = std::chrono::steady_clock::now();
    const auto shapes = ragged_group_shapes(s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim);
    for (const auto& [entries, padded] : shapes) plan(ragged_spec(s, RaggedGroup{entries, padded, {}, {}}, backward));
    log_info("attention: cuDNN's ragged ", backward ? "backward" : "forward", " graphs for ", s.batch, " x ", s.seq,
             " tokens: ", shapes.size(), " built in ",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), " s");
  }

  // The graph of each group of a ragged call over the call's B x T tokens `s`.
  static GraphSpec ragged_spec(const AttentionShape& s, const RaggedGroup& g, bool backward) {
    GraphSpec spec{s, backward, s.batch, s.seq};
    spec.s.batch = g.entries;
    spec.s.seq = g.padded;
    return spec;
  }

  // Scratch bytes of a ragged call (index arrays, then the largest group's workspace), or -1
  // where cuDNN cannot run a group, the offsets do not fit int32 or the bound would not hold.
  int64_t ragged_workspace(const AttentionShape& s, const std::vector<RaggedGroup>& groups, bool backward) {
    const int64_t elements = s.batch * s.seq * (s.n_heads + 2 * s.n_kv_heads) * s.head_dim;
    if (groups.empty() || elements >= (int64_t{1} << 31)) return -1;
    build_ragged_graphs(s, backward);
    int64_t most = 0;
    for (const RaggedGroup& g : groups) {
      const int64_t ws = plan(ragged_spec(s, g, backward)).workspace;
      if (ws < 0) return -1;
      most = std::max(most, ws);
    }
    const int64_t bytes = arrays_bytes(ragged_arrays(s, groups)) + most;
    return bytes <= ragged_spec(s, groups[0], backward).bound() ? bytes : -1;
  }

  // Each group of a ragged call: its index arrays written into the scratch (upload_by_parameters),
  // then one graph per group over `pack`'s tensors.
  bool run_ragged(const AttentionShape& s, const std::vector<RaggedGroup>& groups, bool backward,
                  std::unordered_map<int64_t, void*>& pack, void* scratch) {
    const RaggedArrays a = ragged_arrays(s, groups);
    auto* index = static_cast<int32_t*>(scratch);
    upload_by_parameters(index, a.values, stream);
    void* workspace = static_cast<char*>(scratch) + arrays_bytes(a);
    for (size_t i = 0; i < groups.size(); ++i) {
      pack[kSeqLen] = index + a.at[i].lengths;
      pack[kOffQkv] = index + a.at[i].qkv;
      pack[kOffO] = index + a.at[i].out;
      pack[kOffStats] = index + a.at[i].lse;
      if (!run(ragged_spec(s, groups[i], backward), pack, workspace)) return false;
    }
    return true;
  }
};

CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;

std::unique_ptr<CudnnAttention> CudnnAttention::create(cudaStream_t stream, int sm, AttentionImpl attention,
                                                       std::string* why) {
  if (!load_cudnn(why)) return nullptr;
  auto impl = std::make_unique<Impl>();
  impl->sm = sm;
  impl->impl = attention;
  impl->stream = stream;
  try {
    const size_t version = fe::detail::get_backend_version();
    if (version < 90000) throw std::runtime_error(cat("cuDNN ", cudnn_version(), " is older than 9.0"));
    cudnn_ok(fe::detail::create_handle(&impl->handle), "cudnnCreate");
    cudnn_ok(fe::detail::set_stream(impl->handle, stream), "cudnnSetStream");
  } catch (const std::exception& e) {
    *why = e.what();
    return nullptr;
  }
  return std::unique_ptr<CudnnAttention>(new CudnnAttention(std::move(impl)));
}

std::string cudnn_version() {
  std::string why;
  if (!load_cudnn(&why)) return "";
  const size_t v = fe::detail::get_backend_version();
  return cat(v / 10000, ".", v / 100 % 100, ".", v % 100);
}

int64_t CudnnAttention::forward_workspace(const AttentionShape& s) { return impl_->plan({s, false}).workspace; }
int64_t CudnnAttention::backward_workspace(const AttentionShape& s) { return impl_->plan({s, true}).workspace; }
int64_t CudnnAttention::ragged_workspace(const AttentionShape& s, const std::vector<RaggedGroup>& groups,
                                         bool backward) {
  return impl_->ragged_workspace(s, groups, backward);
}

namespace {

std::unordered_map<int64_t, void*> forward_pack(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                                                const AttentionShape& s) {
  auto* base = const_cast<__nv_bfloat16*>(qkv);
  return {{kQ, base},
          {kK, base + s.n_heads * s.head_dim},
          {kV, base + (s.n_heads + s.n_kv_heads) * s.head_dim},
          {kO, out},
          {kStats, lse}};
}

std::unordered_map<int64_t, void*> backward_pack(__nv_bfloat16* dqkv, const __nv_bfloat16* dout,
                                                 const __nv_bfloat16* qkv, const __nv_bfloat16* out, const float* lse,
                                                 const AttentionShape& s) {
  auto* base = const_cast<__nv_bfloat16*>(qkv);
  const int64_t k_off = s.n_heads * s.head_dim, v_off = (s.n_heads + s.n_kv_heads) * s.head_dim;
  return {{kQ, base},
          {kK, base + k_off},
          {kV, base + v_off},
          {kO, const_cast<__nv_bfloat16*>(out)},
          {kDO, const_cast<__nv_bfloat16*>(dout)},
          {kStats, const_cast<float*>(lse)},
          {kDQ, dqkv},
          {kDK, dqkv + k_off},
          {kDV, dqkv + v_off}};
}

}  // namespace

bool CudnnAttention::forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, const AttentionShape& s,
                             void* workspace) {
  auto pack = forward_pack(out, lse, qkv, s);
  if (!impl_->run({s, false}, pack, workspace)) return false;
  ++g_forward_runs;
  return true;
}

bool CudnnAttention::backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                              const __nv_bfloat16* out, const float* lse, const AttentionShape& s, void* workspace) {
  auto pack = backward_pack(dqkv, dout, qkv, out, lse, s);
  if (!impl_->run({s, true}, pack, workspace)) return false;
  ++g_backward_runs;
  return true;
}

bool CudnnAttention::forward_ragged(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv,
                                    const AttentionShape& s, const std::vector<RaggedGroup>& groups, void* scratch) {
  auto pack = forward_pack(out, lse, qkv, s);
  if (!impl_->run_ragged(s, groups, false, pack, scratch)) return false;
  ++g_forward_runs;
  return true;
}

bool CudnnAttention::backward_ragged(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                                     const __nv_bfloat16* out, const float* lse, const AttentionShape& s,
                                     const std::vector<RaggedGroup>& groups, void* scratch) {
  auto pack = backward_pack(dqkv, dout, qkv, out, lse, s);
  if (!impl_->run_ragged(s, groups, true, pack, scratch)) return false;
  ++g_backward_runs;
  return true;
}

#else  // built without cuDNN

struct CudnnAttention::Impl {};
CudnnAttention::CudnnAttention(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnAttention::~CudnnAttention() = default;
std::unique_ptr<CudnnAttention> CudnnAttention::create(cudaStream_t, int, AttentionImpl, std::string* why) {
  *why = "anvil was built without cuDNN (cudnn.h or the cudnn-frontend headers were not found)";
  return nullptr;
}
std::string cudnn_version() { return ""; }
int64_t CudnnAttention::forward_workspace(const AttentionShape&) { return -1; }
int64_t CudnnAttention::backward_workspace(const AttentionShape&) { return -1; }
bool CudnnAttention::forward(__nv_bfloat16*, float*, const __nv_bfloat16*, const AttentionShape&, void*) { return false; }
bool CudnnAttention::backward(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                              const float*, const AttentionShape&, void*) {
  return false;
}
int64_t CudnnAttention::ragged_workspace(const AttentionShape&, const std::vector<RaggedGroup>&, bool) { return -1; }
bool CudnnAttention::forward_ragged(__nv_bfloat16*, float*, const __nv_bfloat16*, const AttentionShape&,
                                    const std::vector<RaggedGroup>&, void*) {
  return false;
}
bool CudnnAttention::backward_ragged(__nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*, const __nv_bfloat16*,
                                     const float*, const AttentionShape&, const std::vector<RaggedGroup>&, void*) {
  return false;
}

#endif

}  // namespace anvil::cuda
