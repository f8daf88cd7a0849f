// Packed documents laid out for cuDNN's ragged attention (ops/attention_ragged.h), on the
// host: document lengths from positions (ops/documents.h); the groups of a layout hold every
// document once, at its tokens, in token order, each group's entries a power of two and its
// padded length the bucket of its longest, each within the memory plan's bound of the call;
// chat-like micro-batches (1-30 documents in 2048 tokens) form one or two groups, of shapes
// among those built ahead; layouts too
// fragmented to fit are not laid out; and attention refuses lengths that disagree with its
// sequences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <vector>

#include "core/error.h"
#include "ops/attention_ragged.h"
#include "ops/attention_scratch.h"
#include "ops/documents.h"
#include "ops/ops.h"

namespace anvil {
namespace {

TEST(AttentionRagged, DocumentLengthsFromPositions) {
  EXPECT_EQ(document_lengths(std::vector<int32_t>{0, 1, 2, 0, 0, 1, 0, 1, 2, 3}), (std::vector<int32_t>{3, 1, 2, 4}));
  EXPECT_EQ(document_lengths(std::vector<int64_t>{0, 1, 2, 3}), (std::vector<int32_t>{4}));
  EXPECT_TRUE(document_lengths(std::vector<int32_t>{}).empty());
}

TEST(AttentionRagged, PaddedLengthBuckets) {
  const std::vector<std::pair<int64_t, int64_t>> cases = {{1, 128},     {128, 128},   {129, 192},   {192, 192},
                                                          {193, 256},   {300, 384},   {385, 512},   {513, 768},
                                                          {1000, 1024}, {1025, 1536}, {2048, 2048}, {2049, 3072}};
  for (const auto& [longest, padded] : cases) EXPECT_EQ(ragged_padded_length(longest), padded) << longest;
}

// Every document of `lengths` once across the groups, at its first token; the groups'
// shapes and bounds as attention_ragged.h says.
void check_groups(const std::vector<int32_t>& lengths, int64_t B, int64_t T, int64_t H, int64_t KV, int64_t hd,
                  const std::vector<RaggedGroup>& groups) {
  std::map<int64_t, int32_t> want, got;  // first token -> length
  for (int64_t at = 0; const int32_t n : lengths) want[at] = n, at += n;
  const int64_t bound = attention_scratch_bytes(B, T, H, KV, hd);
  const std::vector<std::pair<int64_t, int64_t>> shapes = ragged_group_shapes(B, T, H, KV, hd);
  for (const RaggedGroup& g : groups) {
    EXPECT_NE(std::find(shapes.begin(), shapes.end(), std::make_pair(g.entries, g.padded)), shapes.end())
        << g.entries << " x " << g.padded << " is not among the shapes built ahead";
    ASSERT_GT(g.entries, 0);
    EXPECT_EQ(g.entries & (g.entries - 1), 0) << g.entries << " entries: not a power of two";
    ASSERT_EQ(static_cast<int64_t>(g.starts.size()), g.entries);
    ASSERT_EQ(static_cast<int64_t>(g.lengths.size()), g.entries);
    EXPECT_LE(ragged_call_bytes(g.entries, g.padded, H, hd), bound);
    EXPECT_EQ(g.padded, std::min(ragged_padded_length(*std::max_element(g.lengths.begin(), g.lengths.end())), T));
    for (size_t e = 0; e < g.starts.size(); ++e) {
      if (e > 0) {
        EXPECT_GE(g.starts[e], g.starts[e - 1] + g.lengths[e - 1]) << "entries out of token order";
      }
      if (g.lengths[e] == 0) continue;
      EXPECT_TRUE(got.emplace(g.starts[e], g.lengths[e]).second) << "document at " << g.starts[e] << " twice";
    }
  }
  EXPECT_EQ(got, want);
}

std::vector<int32_t> lengths_of(int64_t B, int64_t T, const std::vector<int32_t>& one_sequence) {
  std::vector<int32_t> all;
  for (int64_t b = 0; b < B; ++b) {
    int64_t left = T;
    for (size_t i = 0; left > 0; ++i) {
      const int32_t n = static_cast<int32_t>(std::min<int64_t>(left, one_sequence[i % one_sequence.size()]));
      all.push_back(n);
      left -= n;
    }
  }
  return all;
}

TEST(AttentionRagged, ChatBinsFormFewGroups) {
  const int64_t T = 2048, H = 16, KV = 8, hd = 128;  // Qwen3-1.7B at sequence 2048
  const std::vector<std::vector<int32_t>> bins = {
      {2048}, {1500, 548}, {1400, 500, 148}, {900, 700, 300, 148}, {620, 480, 300, 250, 200, 198},
      {300, 250, 200, 180, 160, 150, 140, 120, 110, 100, 90, 80, 70, 60, 50, 40}, std::vector<int32_t>(30, 68)};
  for (const std::vector<int32_t>& bin : bins) {
    const std::vector<int32_t> lengths = lengths_of(1, T, bin);
    const std::vector<RaggedGroup> groups = ragged_groups(lengths, 1, T, H, KV, hd);
    check_groups(lengths, 1, T, H, KV, hd, groups);
    EXPECT_GE(groups.size(), 1u);
    EXPECT_LE(groups.size(), 2u) << lengths.size() << " documents";
  }
}

// The graphs built ahead at Qwen3-1.7B's sequence 2048: 35 shapes, each within the bound.
TEST(AttentionRagged, GroupShapesBuiltAhead) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = ragged_group_shapes(1, 2048, 16, 8, 128);
  EXPECT_EQ(shapes.size(), 35u);
  for (const auto& [entries, padded] : shapes) EXPECT_LE(ragged_call_bytes(entries, padded, 16, 128),
                                                         attention_scratch_bytes(1, 2048, 16, 8, 128));
  EXPECT_EQ(shapes.front(), std::make_pair(int64_t{1}, int64_t{128}));
  EXPECT_EQ(shapes.back(), std::make_pair(int64_t{1}, int64_t{2048}));
  EXPECT_EQ(ragged_group_shapes(2, 37, 4, 2, 16).back().second, 37);
}

TEST(AttentionRagged, SeveralSequencesAndShapes) {
  for (const auto& [B, T, H] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {2, 200, 4}, {1, 333, 32}, {2, 130, 2}, {4, 2048, 32}, {1, 1024, 16}, {2, 37, 4}, {1, 1100, 16}}) {
    for (const std::vector<int32_t>& docs : std::vector<std::vector<int32_t>>{
             {1 << 30}, {100, 1 << 30}, {1, 5, 64, 2, 130, 1, 17, 33, 65, 3}, {1}}) {
      const std::vector<int32_t> lengths = lengths_of(B, T, docs);
      const std::vector<RaggedGroup> groups = ragged_groups(lengths, B, T, H, 8, 128);
      if (docs.back() == 1 << 30) {  // documents as long as the sequence fit, as the dense call does
        EXPECT_FALSE(groups.empty()) << B << " x " << T;
      }
      if (groups.empty()) continue;  // too fragmented: the kernel runs it
      EXPECT_LE(static_cast<int>(groups.size()), kMaxRaggedGroups);
      check_groups(lengths, B, T, H, 8, 128, groups);
    }
  }
}

// Documents of one token each at a short sequence: each group holds few (their dP is padded
// to 128 x 128), so more than kMaxRaggedGroups would be needed; not laid out.
TEST(AttentionRagged, TooFragmentedIsNotLaidOut) {
  EXPECT_TRUE(ragged_groups(std::vector<int32_t>(74, 1), 2, 37, 4, 2, 128).empty());
  EXPECT_FALSE(ragged_groups({37, 37}, 2, 37, 4, 2, 128).empty());
}

TEST(AttentionRagged, AttentionChecksTheLengths) {
  auto ops = make_cpu_ops();
  const int64_t B = 2, T = 4;
  std::vector<float> qkv(B * T * 3 * 8), out(B * T * 8), lse(B * T);
  std::vector<int32_t> pos = {0, 1, 2, 3, 0, 1, 0, 1};
  const Tensor q(qkv.data(), DType::kF32, {B, T, 3, 8}), o(out.data(), DType::kF32, {B, T, 1, 8});
  const Tensor l(lse.data(), DType::kF32, {B, 1, T}), p(pos.data(), DType::kI32, {B * T});
  ops->attention_forward(o, l, q, 1, 1, Documents(p, {4, 2, 2}));
  for (const std::vector<int32_t>& bad : std::vector<std::vector<int32_t>>{{4, 2}, {3, 3, 2}, {4, 0, 2, 2}}) {
    try {
      ops->attention_forward(o, l, q, 1, 1, Documents(p, bad));
      ADD_FAILURE() << "lengths of " << bad.size() << " documents accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("document"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace anvil
