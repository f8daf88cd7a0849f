// cuDNN's fused attention through the cudnn-frontend graph API (attention_cudnn.h).
//
// One graph per (shape, direction): q, k, v as (B, heads, T, hd) tensors whose strides walk
// the packed qkv (token stride (H + 2KV) hd, head stride hd), out and dout as (B, H, T, hd)
// views of (B, T, H, hd), Stats (B, H, T, 1) packed, which is our lse buffer as it is. Each
// graph is built once (finish()); execute() then only binds the pointers of the call.
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

#include <atomic>
#include <cmath>
#include <exception>
#include <map>
#include <mutex>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "core/log.h"
#include "ops/attention_scratch.h"

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

enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV };

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

// q, k and v: views into the packed qkv.
struct Inputs {
  TensorPtr q, k, v;
};
Inputs qkv_inputs(fe::graph::Graph& g, const AttentionShape& s) {
  const int64_t width = s.n_heads + 2 * s.n_kv_heads;
  return {tensor(g, "Q", kQ, view_dims(s, s.n_heads), view_strides(s, width)),
          tensor(g, "K", kK, view_dims(s, s.n_kv_heads), view_strides(s, width)),
          tensor(g, "V", kV, view_dims(s, s.n_kv_heads), view_strides(s, width))};
}
Dims stats_dims(const AttentionShape& s) { return {s.batch, s.n_heads, s.seq, 1}; }
Dims stats_strides(const AttentionShape& s) { return {s.n_heads * s.seq, s.seq, 1, 1}; }

float attention_scale(const AttentionShape& s) { return 1.0f / std::sqrt(static_cast<float>(s.head_dim)); }

// Validated, lowered, planned by cuDNN's heuristics (mode A; engines whose workspace is over
// the memory plan's bound are passed over), support-checked and built.
void finish(fe::graph::Graph& g, const AttentionShape& s, cudnnHandle_t handle) {
  g.deselect_workspace_greater_than(attention_scratch_bytes(s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim));
  ok(g.validate(), "validate");
  ok(g.build_operation_graph(handle), "build_operation_graph");
  ok(g.create_execution_plans({fe::HeurMode_t::A}), "create_execution_plans");
  ok(g.check_support(handle), "check_support");
  ok(g.build_plans(handle), "build_plans");
}

std::shared_ptr<fe::graph::Graph> build_forward(const AttentionShape& s, int sm, cudnnHandle_t handle) {
  auto g = new_graph(sm);
  const Inputs in = qkv_inputs(*g, s);
  auto options = fe::graph::SDPA_attributes()
                     .set_name("attention_forward")
                     .set_generate_stats(true)
                     .set_causal_mask(true)
                     .set_attn_scale(attention_scale(s));
  auto [o, stats] = g->sdpa(in.q, in.k, in.v, options);
  set_output(o, kO, view_dims(s, s.n_heads), view_strides(s, s.n_heads));
  set_output(stats, kStats, stats_dims(s), stats_strides(s), fe::DataType_t::FLOAT);
  finish(*g, s, handle);
  return g;
}

std::shared_ptr<fe::graph::Graph> build_backward(const AttentionShape& s, bool deterministic, int sm,
                                                 cudnnHandle_t handle) {
  auto g = new_graph(sm);
  const Inputs in = qkv_inputs(*g, s);
  const int64_t width = s.n_heads + 2 * s.n_kv_heads;
  TensorPtr o = tensor(*g, "O", kO, view_dims(s, s.n_heads), view_strides(s, s.n_heads));
  TensorPtr dout = tensor(*g, "dO", kDO, view_dims(s, s.n_heads), view_strides(s, s.n_heads));
  TensorPtr stats = tensor(*g, "Stats", kStats, stats_dims(s), stats_strides(s), fe::DataType_t::FLOAT);
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_backward")
                     .set_causal_mask(true)
                     .set_attn_scale(attention_scale(s))
                     .set_deterministic_algorithm(deterministic);
  auto [dq, dk, dv] = g->sdpa_backward(in.q, in.k, in.v, o, dout, stats, options);
  set_output(dq, kDQ, view_dims(s, s.n_heads), view_strides(s, width));
  set_output(dk, kDK, view_dims(s, s.n_kv_heads), view_strides(s, width));
  set_output(dv, kDV, view_dims(s, s.n_kv_heads), view_strides(s, width));
  finish(*g, s, handle);
  return g;
}

std::string shape_text(const AttentionShape& s, bool backward) {
  return cat(backward ? "backward" : "forward", " of batch ", s.batch, " x ", s.seq, " tokens, ", s.n_heads, "/",
             s.n_kv_heads, " heads of ", s.head_dim);
}

}  // namespace

struct CudnnAttention::Impl {
  struct Plan {
    std::shared_ptr<fe::graph::Graph> graph;  // null: cuDNN does not run this shape
    int64_t workspace = -1;
  };
  using Key = std::tuple<int64_t, int64_t, int, int, int, bool>;

  cudnnHandle_t handle = nullptr;
  int sm = 0;  // compute capability, major * 10 + minor
  AttentionImpl impl = AttentionImpl::kCudnn;
  std::map<Key, Plan> plans;

  ~Impl() {
    plans.clear();
    if (handle) (void)fe::detail::destroy_handle(handle);
  }

  Plan& plan(const AttentionShape& s, bool backward) {
    const Key key{s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim, backward};
    if (auto it = plans.find(key); it != plans.end()) return it->second;
    Plan p;
    const bool within = cudnn_backward_within_bound(s.batch, s.seq, s.n_heads);
    if (backward && !within && impl != AttentionImpl::kCudnnNondeterministic) past_the_bound_note(s);
    if (backward && !within && impl == AttentionImpl::kCudnnDeterministic)
      return plans.emplace(key, std::move(p)).first->second;
    try {
      const bool deterministic = within && impl != AttentionImpl::kCudnnNondeterministic;
      p.graph = backward ? build_backward(s, deterministic, sm, handle) : build_forward(s, sm, handle);
      ok(p.graph->get_workspace_size(p.workspace), "get_workspace_size");
      const int64_t bound = attention_scratch_bytes(s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim);
      if (p.workspace > bound)
        throw std::runtime_error(cat("its workspace of ", p.workspace, " bytes is more than the memory plan's ", bound));
    } catch (const std::exception& e) {
      p = Plan{};
      log_warn("attention: cuDNN cannot run the ", shape_text(s, backward), " (", e.what(),
               "); anvil's kernel runs it");
    }
    return plans.emplace(key, std::move(p)).first->second;
  }

  // What runs a backward whose deterministic dP is over the bound, said once per shape.
  void past_the_bound_note(const AttentionShape& s) const {
    const std::string why = cat("cuDNN's deterministic backward would keep dP, ",
                                cudnn_dp_bytes(s.batch, s.seq, s.n_heads) >> 20, " MiB, over the ",
                                kCudnnDpBound >> 20, " MiB bound (ops/attention_scratch.h)");
    const int64_t scratch = attention_scratch_bytes(s.batch, s.seq, s.n_heads, s.n_kv_heads, s.head_dim) >> 20;
    if (impl == AttentionImpl::kCudnnDeterministic)
      log_info("attention: the ", shape_text(s, true), " runs anvil's kernel (fp32 dK/dV partials, ", scratch,
               " MiB): ", why, "; ANVIL_ATTENTION=cudnn runs cuDNN's non-deterministic backward there, about twice "
               "as fast");
    else
      log_info("attention: the ", shape_text(s, true), " runs cuDNN's non-deterministic backward (within ", scratch,
               " MiB): ", why, "; runs at this length do not repeat bit for bit (ANVIL_ATTENTION=cudnn-deterministic: "
               "anvil's kernel, about half as fast)");
  }

  bool run(const AttentionShape& s, bool backward, std::unordered_map<int64_t, void*>& pack, void* workspace) {
    Plan& p = plan(s, backward);
    if (!p.graph) return false;
    std::string error;
    try {
      fe::error_t status = p.graph->execute(handle, pack, workspace);
      if (status.is_bad()) error = status.get_message();
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (error.empty()) return true;
    log_warn("attention: cuDNN failed to run the ", shape_text(s, backward), " (", error,
             "); anvil's kernel runs it from now on");
    p = Plan{};
    return false;
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

int64_t CudnnAttention::forward_workspace(const AttentionShape& s) { return impl_->plan(s, false).workspace; }
int64_t CudnnAttention::backward_workspace(const AttentionShape& s) { return impl_->plan(s, true).workspace; }

bool CudnnAttention::forward(__nv_bfloat16* out, float* lse, const __nv_bfloat16* qkv, const AttentionShape& s,
                             void* workspace) {
  auto* base = const_cast<__nv_bfloat16*>(qkv);
  std::unordered_map<int64_t, void*> pack{{kQ, base},
                                          {kK, base + s.n_heads * s.head_dim},
                                          {kV, base + (s.n_heads + s.n_kv_heads) * s.head_dim},
                                          {kO, out},
                                          {kStats, lse}};
  if (!impl_->run(s, false, pack, workspace)) return false;
  ++g_forward_runs;
  return true;
}

bool CudnnAttention::backward(__nv_bfloat16* dqkv, const __nv_bfloat16* dout, const __nv_bfloat16* qkv,
                              const __nv_bfloat16* out, const float* lse, const AttentionShape& s, void* workspace) {
  auto* base = const_cast<__nv_bfloat16*>(qkv);
  const int64_t k_off = s.n_heads * s.head_dim, v_off = (s.n_heads + s.n_kv_heads) * s.head_dim;
  std::unordered_map<int64_t, void*> pack{{kQ, base},
                                          {kK, base + k_off},
                                          {kV, base + v_off},
                                          {kO, const_cast<__nv_bfloat16*>(out)},
                                          {kDO, const_cast<__nv_bfloat16*>(dout)},
                                          {kStats, const_cast<float*>(lse)},
                                          {kDQ, dqkv},
                                          {kDK, dqkv + k_off},
                                          {kDV, dqkv + v_off}};
  if (!impl_->run(s, true, pack, workspace)) return false;
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

#endif

}  // namespace anvil::cuda
