// The backend's workspaces: the device memory an op set takes besides parameters and
// activations, as one table of named entries for given shapes. The backend allocates from it
// (Ops::reserve_workspaces) and the memory plan counts it (plan/memory_plan.cpp), so the two
// cannot differ.
//
// CUDA: the cuBLASLt workspace of the bf16 GEMMs, the FP8 GEMMs' own (with an FP8 recipe), and
// the shared scratch, which the ops that need temporary device memory take in turn on the main
// queue (ops/cuda/cuda_ops.h): it holds the largest of the cross-entropy chunk
// (ops/cross_entropy_chunks.h), attention's temporaries (ops/attention_scratch.h) and an FP8
// GEMM's operand copies (ops/fp8_recipe.h). The CPU: none (its ops keep their temporaries on
// the host's heap).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/fp8_recipe.h"

namespace anvil {

constexpr int64_t kGemmWorkspaceBytes = int64_t{32} << 20;     // cuBLAS's advice for Hopper
constexpr int64_t kFp8GemmWorkspaceBytes = int64_t{32} << 20;  // the FP8 GEMMs' (ops/cuda/gemm_fp8.h)

// The shapes of one micro-batch that the workspaces depend on, as one rank runs it (context
// parallel: attention over every token of the rank's share of the heads, the linear layers
// and the loss over its slice of the tokens).
struct WorkspaceShape {
  int64_t batch = 0, seq = 0;                     // sequences, and tokens of each
  int64_t tokens = 0;                             // rows of the linear layers and the loss
  int64_t heads = 0, kv_heads = 0, head_dim = 0;  // attention's
  int64_t vocab = 0;
  std::vector<std::pair<int64_t, int64_t>> linears;  // (out, in) of each block linear layer
  Fp8Recipe fp8 = Fp8Recipe::kOff;                   // the block linears' recipe
};

struct WorkspaceEntry {
  const char* name;  // "gemm workspace", "fp8 gemm workspace", "scratch"
  int64_t bytes;
};

// The workspaces of the backend on `device` for shape s.
std::vector<WorkspaceEntry> workspace_table(Device device, const WorkspaceShape& s);
// The bytes of the entry named `name`, 0 where the table has none.
int64_t workspace_entry(const std::vector<WorkspaceEntry>& table, const char* name);
int64_t workspace_total(const std::vector<WorkspaceEntry>& table);

}  // namespace anvil
