// Packed documents laid out for cuDNN's ragged (THD, varlen) fused attention: each document
// is one of cuDNN's batch entries, its tokens found through ragged offsets into the packed
// qkv, its length given as the entry's sequence length (padding mask), the entries' padded
// length the graph's sequence dimension.
//
// A graph is built per (entries, padded length), so both are bucketed: the entries to a
// power of two (unused ones of length 0), the padded length to 128 tokens times 1 or 1.5
// times a power of two (128, 192, 256, 384, 512, 768, 1024, 1536, 2048, ...; at most the
// sequence length, the dense graph's). cuDNN's
// deterministic backward keeps dP of every entry padded, entries x H x S x S bf16
// (ops/attention_scratch.h), so one call of many short documents and one long one would
// need far more than the dense batch's B x H x T x T: the documents, longest first, are
// split into groups, one cuDNN call each, each within the memory plan's bound of the call
// (attention_scratch_bytes of the B x T tokens). A layout of more than kMaxRaggedGroups
// groups is not laid out (the caller runs anvil's kernel).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace anvil {

constexpr int kMaxRaggedGroups = 16;

struct RaggedGroup {
  int64_t entries = 0;   // cuDNN's batch: a power of two
  int64_t padded = 0;    // cuDNN's sequence length, the bucket of the group's longest document
  std::vector<int64_t> starts;   // per entry: its first token in the B*T tokens (unused: the group's end)
  std::vector<int32_t> lengths;  // per entry: its tokens (unused: 0)
};

// The bucket of a document of `longest` tokens (above).
int64_t ragged_padded_length(int64_t longest);

// The bytes one ragged call of `entries` x `padded` takes at most, as the dense bound counts
// them: cuDNN's deterministic dP, its fp32 dQ accumulator and softmax sums (measured on an
// H200, cuDNN 9.14: 16 x 192 tokens x 16 heads of 128 take 50.5 MB, dP 25.2 MB of it), and
// 8 MiB for the engine's own.
int64_t ragged_call_bytes(int64_t entries, int64_t padded, int64_t n_heads, int64_t head_dim);

// Every (entries, padded) a group of ragged_groups can have for a call of batch x seq: the
// graphs a backend builds ahead, all at the first packed call (a run of chats meets most of
// them within its first steps; built one by one they would stall those steps).
std::vector<std::pair<int64_t, int64_t>> ragged_group_shapes(int64_t batch, int64_t seq, int64_t n_heads,
                                                             int64_t n_kv_heads, int64_t head_dim);

// The groups of documents of `lengths` (token order, filling batch x seq tokens, none across
// a sequence's end), each within the bound; empty where none can be (or more than
// kMaxRaggedGroups would be needed).
std::vector<RaggedGroup> ragged_groups(const std::vector<int32_t>& lengths, int64_t batch, int64_t seq,
                                       int64_t n_heads, int64_t n_kv_heads, int64_t head_dim);

}  // namespace anvil
