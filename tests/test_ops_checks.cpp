// ops: the front of the op set (ops/ops.cpp) checks every op's tensors for every backend.
// Each op is called on the CPU backend with one tensor of a wrong shape (or dtype), among
// tensors that are otherwise right, and must refuse it with a kInternal error that names the
// op and the tensor, before the backend touches memory.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "ops/ops.h"

namespace anvil {
namespace {

// Views into one host buffer: the checks run before any op reads or writes it.
class Views {
 public:
  Tensor f32(Shape s) { return {floats_.data(), DType::kF32, s}; }
  Tensor i32(Shape s) { return {ints_.data(), DType::kI32, s}; }
  Tensor bf16(Shape s) { return {floats_.data(), DType::kBF16, s}; }
  Tensor i16(Shape s) { return {floats_.data(), DType::kI16, s}; }

 private:
  std::vector<float> floats_ = std::vector<float>(1 << 16, 1.0f);
  std::vector<int32_t> ints_ = std::vector<int32_t>(1 << 12, 0);
};

struct Case {
  const char* op;      // the op its error must name
  const char* tensor;  // and the tensor
  std::function<void(Ops&, Views&)> call;
};

// Shapes: rows 6, width 8 (C), N 10 (outputs), heads 2 + 2*1 of head_dim 4, vocab 12.
std::vector<Case> cases() {
  const AdamWHyper hp;
  return {
    {"linear_forward", "shapes",
     [](Ops& o, Views& v) { o.linear_forward(v.f32({6, 10}), v.f32({6, 8}), v.f32({10, 7}), {}); }},
    {"linear_forward", "bias",
     [](Ops& o, Views& v) { o.linear_forward(v.f32({6, 10}), v.f32({6, 8}), v.f32({10, 8}), v.f32({9})); }},
    {"linear_backward_input", "shapes",
     [](Ops& o, Views& v) { o.linear_backward_input(v.f32({6, 9}), v.f32({6, 10}), v.f32({10, 8}), false); }},
    {"linear_backward_weight", "shapes",
     [](Ops& o, Views& v) { o.linear_backward_weight(v.f32({10, 8}), {}, v.f32({6, 10}), v.f32({5, 8})); }},
    {"linear_backward_weight", "dbias",
     [](Ops& o, Views& v) { o.linear_backward_weight(v.f32({10, 8}), v.f32({8}), v.f32({6, 10}), v.f32({6, 8})); }},
    {"embedding_forward", "out",
     [](Ops& o, Views& v) { o.embedding_forward(v.f32({6, 7}), v.i32({6}), v.f32({12, 8})); }},
    {"embedding_forward", "ids",
     [](Ops& o, Views& v) { o.embedding_forward(v.f32({6, 8}), v.f32({6}), v.f32({12, 8})); }},
    {"embedding_backward", "dout",
     [](Ops& o, Views& v) { o.embedding_backward(v.f32({12, 8}), v.i32({6}), v.f32({5, 8})); }},
    {"rmsnorm_forward", "rstd",
     [](Ops& o, Views& v) { o.rmsnorm_forward(v.f32({6, 8}), v.f32({5}), v.f32({6, 8}), v.f32({8}), 1e-6f); }},
    {"rmsnorm_forward", "w",
     [](Ops& o, Views& v) { o.rmsnorm_forward(v.f32({6, 8}), v.f32({6}), v.f32({6, 8}), v.f32({7}), 1e-6f); }},
    {"rmsnorm_backward", "dw",
     [](Ops& o, Views& v) {
       o.rmsnorm_backward(v.f32({6, 8}), v.f32({9}), v.f32({6, 8}), v.f32({6, 8}), v.f32({8}), v.f32({6}), false);
     }},
    {"add_rmsnorm_forward", "b",
     [](Ops& o, Views& v) {
       o.add_rmsnorm_forward(v.f32({6, 8}), v.f32({6, 8}), v.f32({6}), v.f32({6, 8}), v.f32({6, 7}), v.f32({8}), 1e-6f);
     }},
    {"qk_norm_rope_forward", "cos",
     [](Ops& o, Views& v) {
       o.qk_norm_rope_forward(v.f32({6, 4, 4}), v.f32({6, 3}), v.f32({6, 4, 4}), v.f32({4}), v.f32({4}), v.f32({3, 3}),
                              v.f32({3, 3}), 2, 1, 1e-6f);
     }},
    {"qk_norm_rope_forward", "rstd",
     [](Ops& o, Views& v) {
       o.qk_norm_rope_forward(v.f32({6, 4, 4}), v.f32({6, 2}), v.f32({6, 4, 4}), v.f32({4}), v.f32({4}), v.f32({3, 2}),
                              v.f32({3, 2}), 2, 1, 1e-6f);
     }},
    {"qk_norm_rope_backward", "dk_w",
     [](Ops& o, Views& v) {
       o.qk_norm_rope_backward(v.f32({6, 4, 4}), v.f32({4}), v.f32({5}), v.f32({6, 4, 4}), v.f32({6, 4, 4}), v.f32({4}),
                               v.f32({4}), v.f32({6, 3}), v.f32({3, 2}), v.f32({3, 2}), 2, 1);
     }},
    {"attention_forward", "qkv",
     [](Ops& o, Views& v) { o.attention_forward(v.f32({2, 3, 2, 4}), v.f32({2, 2, 3}), v.f32({2, 3, 5, 4}), 2, 1); }},
    {"attention_forward", "lse",
     [](Ops& o, Views& v) { o.attention_forward(v.f32({2, 3, 2, 4}), v.f32({2, 2, 2}), v.f32({2, 3, 4, 4}), 2, 1); }},
    {"attention_backward", "dout",
     [](Ops& o, Views& v) {
       o.attention_backward(v.f32({2, 3, 4, 4}), v.f32({2, 3, 2, 3}), v.f32({2, 3, 4, 4}), v.f32({2, 3, 2, 4}),
                            v.f32({2, 2, 3}), 2, 1);
     }},
    {"attention_cached", "positions",
     [](Ops& o, Views& v) {
       o.attention_cached(v.f32({3, 2, 4}), v.f32({3, 4, 4}), v.f32({2, 1, 8, 4}), v.f32({2, 1, 8, 4}), v.i32({3}),
                          v.i32({2}), 2, 1);
     }},
    {"attention_cached", "cache",
     [](Ops& o, Views& v) {
       o.attention_cached(v.f32({3, 2, 4}), v.f32({3, 4, 4}), v.f32({2, 1, 8, 4}), v.f32({2, 1, 7, 4}), v.i32({3}),
                          v.i32({3}), 2, 1);
     }},
    {"argmax_rows", "out", [](Ops& o, Views& v) { o.argmax_rows(v.i32({5}), v.f32({6, 12})); }},
    {"swiglu_forward", "out", [](Ops& o, Views& v) { o.swiglu_forward(v.f32({6, 5}), v.f32({6, 8})); }},
    {"swiglu_forward", "gate_up", [](Ops& o, Views& v) { o.swiglu_forward(v.f32({6, 3}), v.f32({6, 7})); }},
    {"swiglu_backward", "act",
     [](Ops& o, Views& v) { o.swiglu_backward(v.f32({6, 8}), v.f32({6, 4}), v.f32({6, 8}), v.f32({6, 3})); }},
    {"add", "b", [](Ops& o, Views& v) { o.add(v.f32({6, 8}), v.f32({6, 8}), v.f32({6, 7})); }},
    {"add", "a", [](Ops& o, Views& v) { o.add(v.f32({6, 8}), v.i32({6, 8}), v.f32({6, 8})); }},
    {"cross_entropy_forward_backward", "targets",
     [](Ops& o, Views& v) {
       o.cross_entropy_forward_backward(v.f32({1}), v.f32({6, 8}), v.f32({12, 8}), v.f32({6, 8}), v.f32({12, 8}),
                                        v.i32({5}), 1.0f, {});
     }},
    {"cross_entropy_forward_backward", "dh and dw",
     [](Ops& o, Views& v) {
       o.cross_entropy_forward_backward(v.f32({1}), v.f32({6, 8}), {}, v.f32({6, 8}), v.f32({12, 8}), v.i32({6}), 1.0f,
                                        {});
     }},
    {"adamw_step", "v",
     [hp](Ops& o, Views& v) { o.adamw_step(v.f32({16}), v.f32({16}), v.f32({16}), v.f32({15}), hp, 1.0f, {}, false); }},
    {"adamw_step", "grad",
     [hp](Ops& o, Views& v) {
       o.adamw_step(v.f32({16}), v.bf16({16}), v.f32({16}), v.f32({16}), hp, 1.0f, {}, false);
     }},
    {"adamw_step_split", "lo",
     [hp](Ops& o, Views& v) {
       o.adamw_step_split(v.bf16({16}), v.i16({17}), v.f32({16}), v.f32({16}), v.f32({16}), hp, 1.0f);
     }},
    {"sum_squares", "out", [](Ops& o, Views& v) { o.sum_squares(v.f32({2}), v.f32({16})); }},
    {"convert", "dst", [](Ops& o, Views& v) { o.runtime().convert(v.bf16({15}), v.f32({16})); }},
    {"zero", "t", [](Ops& o, Views&) { o.runtime().zero(Tensor(nullptr, DType::kF32, {4})); }},
  };
}

TEST(OpsChecks, EveryOpRefusesAWrongTensorByName) {
  auto ops = make_cpu_ops();
  Views views;
  for (const Case& c : cases()) {
    SCOPED_TRACE(std::string(c.op) + " / " + c.tensor);
    try {
      c.call(*ops, views);
      ADD_FAILURE() << c.op << " accepted a wrong " << c.tensor;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::kInternal) << e.what();
      const std::string what = e.what();
      EXPECT_EQ(what.rfind(std::string(c.op) + ": ", 0), 0u) << what;
      EXPECT_NE(what.find(c.tensor), std::string::npos) << what;
    }
  }
}

// The same ops with every tensor right pass the front and run (the tensors' values do not
// matter here, only that nothing is refused).
TEST(OpsChecks, RightShapesPass) {
  auto ops = make_cpu_ops();
  Views v;
  ops->linear_forward(v.f32({6, 10}), v.f32({6, 8}), v.f32({10, 8}), v.f32({10}));
  ops->rmsnorm_forward(v.f32({6, 8}), v.f32({6}), v.f32({6, 8}), v.f32({8}), 1e-6f);
  ops->attention_forward(v.f32({2, 3, 2, 4}), v.f32({2, 2, 3}), v.f32({2, 3, 4, 4}), 2, 1);
  ops->swiglu_forward(v.f32({6, 4}), v.f32({6, 8}));
  ops->sum_squares(v.f32({1}), v.f32({16}));
}

}  // namespace
}  // namespace anvil
