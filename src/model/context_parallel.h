// Context parallelism (--context-parallel N, train/config.h) as DeepSpeed-Ulysses: the N
// ranks of a group each hold T/N tokens of every sequence (rank r: tokens [r T/N, (r+1) T/N)),
// for everything outside attention; around attention an all-to-all trades the tokens for
// heads, so that each rank runs the unchanged attention ops (and qk-norm and RoPE) on all T
// tokens of H/N query heads and KV/N key/value heads, then trades them back.
//
// Layouts, for B sequences: "tokens" (B, T/N, W) with W the row's width, made of segments
// (qkv: the q, k and v heads; attention's output: its H heads) whose widths N divides;
// "heads" (B, T, W/N), rank r's part j/N.. of every segment, concatenated: q heads
// [r H/N, (r+1) H/N) with their own kv heads [r KV/N, (r+1) KV/N) under GQA. A layout
// change is a pack into chunks (ops' copy_rows), the comm's all_to_all, and an unpack; the
// backward of either change is the other. Why Ulysses and not ring attention:
// docs/ARCHITECTURE.md ("Context parallelism").
#pragma once

#include <cstdint>
#include <vector>

#include "comm/comm.h"
#include "ops/ops.h"

namespace anvil {

class ContextParallel {
 public:
  // comm: the group of `size` ranks (its world; size 1: no comm needed and nothing moves).
  // send and recv: two scratch buffers of B * T/N * max_width elements of the compute dtype.
  ContextParallel(Comm* comm, int size) : comm_(comm), size_(size) {}

  int size() const { return size_; }
  int rank() const { return comm_ ? comm_->rank() : 0; }
  void set_buffers(Tensor send, Tensor recv) { send_ = send, recv_ = recv; }

  // heads (B, T, W/N) <- tokens (B, T/N, W); heads may be tokens (the pack reads it first).
  void to_heads(Ops& ops, Tensor heads, Tensor tokens, int64_t batch, const std::vector<int64_t>& segments);
  // tokens (B, T/N, W) <- heads (B, T, W/N); tokens may be heads, or staging(): the send
  // buffer, free again once the all-to-all has run.
  void to_tokens(Ops& ops, Tensor tokens, Tensor heads, int64_t batch, const std::vector<int64_t>& segments);
  // The start of the send buffer, shaped `shape`.
  Tensor staging(Shape shape) const;

 private:
  void exchange(const char* what, int64_t elements);  // all_to_all of that many elements, send to recv

  Comm* comm_;
  int size_;
  Tensor send_, recv_;
};

}  // namespace anvil
