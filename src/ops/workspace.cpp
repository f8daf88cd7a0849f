// The backend's workspaces (workspace.h).
#include "ops/workspace.h"

#include <algorithm>
#include <cstring>

#include "ops/attention_scratch.h"
#include "ops/cross_entropy_chunks.h"

namespace anvil {
namespace {

// The largest FP8 copy of a GEMM's two operands (ops/fp8_recipe.h's Fp8Scratch) over the
// blocks' linear layers and their three GEMMs, for n tokens (at most: the MLP's run on its
// tiles): forward (n + out) x in, dx (n + in) x out, dw (out + in) x n; and the two backward
// GEMMs' together (fp8_backward_scratch: dy both ways, 2 n x out, and in x max(n, out)).
int64_t fp8_operand_bytes(const WorkspaceShape& s) {
  const int64_t n = s.tokens;
  int64_t most = 0;
  for (auto [out, in] : s.linears)
    most = std::max({most, fp8_scratch(n, out, in).total(), fp8_scratch(n, in, out).total(),
                     fp8_scratch(out, in, n).total(), fp8_backward_scratch(n, out, in).total()});
  return most;
}

}  // namespace

std::vector<WorkspaceEntry> workspace_table(Device device, const WorkspaceShape& s) {
  if (device == Device::kCPU) return {};
  int64_t scratch = std::max(cross_entropy_chunks(s.tokens, s.vocab).bytes,
                             attention_scratch_bytes(s.batch, s.seq, s.heads, s.kv_heads, s.head_dim));
  std::vector<WorkspaceEntry> t = {{"gemm workspace", kGemmWorkspaceBytes}};
  if (s.fp8 != Fp8Recipe::kOff) {
    t.push_back({"fp8 gemm workspace", kFp8GemmWorkspaceBytes});
    scratch = std::max(scratch, fp8_operand_bytes(s));
  }
  t.push_back({"scratch", scratch});
  return t;
}

int64_t workspace_entry(const std::vector<WorkspaceEntry>& table, const char* name) {
  for (const WorkspaceEntry& e : table)
    if (std::strcmp(e.name, name) == 0) return e.bytes;
  return 0;
}

int64_t workspace_total(const std::vector<WorkspaceEntry>& table) {
  int64_t sum = 0;
  for (const WorkspaceEntry& e : table) sum += e.bytes;
  return sum;
}

}  // namespace anvil
