// The parallel section and the context-parallel rule: see plan/parallel_section.h.
#include "plan/parallel_section.h"

#include "core/error.h"

namespace anvil {

DType blocks_grad_dtype(const ParallelSection& p) {
  ANVIL_ENSURE(p.grad_dtype != GradDType::kAuto, kInternal, "the blocks' gradient dtype is not resolved");
  return p.grad_dtype == GradDType::kBF16 ? DType::kBF16 : DType::kF32;
}

void check_context_parallel_world(int64_t P, int world, const std::string& ranks_flag) {
  ANVIL_ENSURE(P >= 1, kUsage, "--context-parallel ", P, ": must be at least 1");
  ANVIL_ENSURE(P == 1 || P == world, kUsage, "--context-parallel ", P, " on ", world,
               " ranks: the context-parallel group spans every rank of the run (data-parallel groups beside it are "
               "not supported yet); use --context-parallel ", world, " or ", ranks_flag, " ", P);
}

void check_context_parallel(int64_t P, int world, const ModelConfig& model, int64_t seq_len,
                            const std::string& ranks_flag) {
  if (P == 1) return;
  const int64_t KV = model.num_kv_heads;
  ANVIL_ENSURE(P < 1 || KV % P == 0, kUsage, "--context-parallel ", P, ": the model's ", KV,
               " key/value heads do not split evenly over ", P, " ranks (each rank attends with its share of the "
               "heads); use a divisor of ", KV);
  ANVIL_ENSURE(P < 1 || seq_len % P == 0, kUsage, "--context-parallel ", P, ": sequence length ", seq_len,
               " does not split into ", P, " equal slices; use a --seq-len that ", P, " divides");
  check_context_parallel_world(P, world, ranks_flag);
}

}  // namespace anvil
