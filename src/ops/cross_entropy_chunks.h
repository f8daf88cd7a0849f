// How the CUDA backend's fused output projection + cross-entropy cuts its rows
// (ops/cuda/cross_entropy.cu), for that file and for the memory plan (plan/memory_plan.h).
//
// Rows go in blocks of grad_rows: the bf16 gradient of the logits (dlogits) of a whole block
// is kept, so that one dh GEMM and one dw GEMM serve the block (dw, V x C fp32, is read and
// written once per block: fewer, larger blocks cost less). Within a block, the fp32 logits
// exist for logit_rows rows at a time. The two regions together stay within 512 MiB, with
// logit_rows a quarter of grad_rows: 1,152 and 288 rows at V = 151,936.
#pragma once

#include <cstdint>

namespace anvil {

struct CrossEntropyChunks {
  int64_t grad_rows = 0;   // rows per block (at most n)
  int64_t logit_rows = 0;  // rows of fp32 logits at once (at most grad_rows)
  int64_t grad_ld = 0;     // the dlogits' row stride in elements: the vocabulary rounded up to 8
  int64_t logits_bytes = 0, grad_bytes = 0;  // the two regions, each rounded up to 256 bytes
  int64_t bytes = 0;       // the scratch: both regions and n fp32 row losses
};

CrossEntropyChunks cross_entropy_chunks(int64_t n, int64_t vocab);

}  // namespace anvil
