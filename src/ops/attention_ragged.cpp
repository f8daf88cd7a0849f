#include "ops/attention_ragged.h"

#include <algorithm>
#include <numeric>

#include "ops/attention_scratch.h"

namespace anvil {

namespace {

int64_t pow2_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

// The documents order[first, first + count) as one group of `entries` entries, in token order.
RaggedGroup make_group(const std::vector<int64_t>& starts, const std::vector<int32_t>& lengths,
                       std::vector<size_t> members, int64_t entries, int64_t padded) {
  std::sort(members.begin(), members.end());
  RaggedGroup g;
  g.entries = entries;
  g.padded = padded;
  for (size_t d : members) {
    g.starts.push_back(starts[d]);
    g.lengths.push_back(lengths[d]);
  }
  const int64_t end = g.starts.back() + g.lengths.back();
  g.starts.resize(static_cast<size_t>(entries), end);
  g.lengths.resize(static_cast<size_t>(entries), 0);
  return g;
}

// The most entries of `padded` tokens, a power of two, that one call may have within
// `bound`; 0 where not even one fits.
int64_t most_entries(int64_t padded, int64_t bound, int64_t n_heads, int64_t head_dim) {
  if (ragged_call_bytes(1, padded, n_heads, head_dim) > bound) return 0;
  int64_t most = 1;
  while (ragged_call_bytes(2 * most, padded, n_heads, head_dim) <= bound) most *= 2;
  return most;
}

}  // namespace

int64_t ragged_padded_length(int64_t longest) {
  int64_t p = 128;
  for (;; p *= 2) {
    if (longest <= p) return p;
    if (longest <= p + p / 2) return p + p / 2;
  }
}

int64_t ragged_call_bytes(int64_t entries, int64_t padded, int64_t n_heads, int64_t head_dim) {
  const int64_t rows = entries * n_heads * padded;
  return cudnn_dp_bytes(entries, padded, n_heads) + rows * head_dim * 4 + rows * 4 + (int64_t{8} << 20);
}

std::vector<std::pair<int64_t, int64_t>> ragged_group_shapes(int64_t batch, int64_t seq, int64_t n_heads,
                                                             int64_t n_kv_heads, int64_t head_dim) {
  const int64_t bound = attention_scratch_bytes(batch, seq, n_heads, n_kv_heads, head_dim);
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (int64_t longest = 1;; longest = ragged_padded_length(longest) + 1) {
    const int64_t padded = std::min(ragged_padded_length(longest), seq);
    for (int64_t entries = 1; entries <= most_entries(padded, bound, n_heads, head_dim); entries *= 2)
      shapes.emplace_back(entries, padded);
    if (padded == seq) return shapes;
  }
}

std::vector<RaggedGroup> ragged_groups(const std::vector<int32_t>& lengths, int64_t batch, int64_t seq,
                                       int64_t n_heads, int64_t n_kv_heads, int64_t head_dim) {
  const int64_t bound = attention_scratch_bytes(batch, seq, n_heads, n_kv_heads, head_dim);
  std::vector<int64_t> starts(lengths.size());
  for (size_t d = 1; d < lengths.size(); ++d) starts[d] = starts[d - 1] + lengths[d - 1];
  std::vector<size_t> order(lengths.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lengths[a] > lengths[b]; });
  std::vector<RaggedGroup> groups;
  for (size_t i = 0; i < order.size();) {
    if (static_cast<int>(groups.size()) == kMaxRaggedGroups) return {};
    const int64_t padded = std::min(ragged_padded_length(lengths[order[i]]), seq);
    const int64_t most = most_entries(padded, bound, n_heads, head_dim);
    if (most == 0) return {};
    const size_t take = std::min(static_cast<size_t>(most), order.size() - i);
    groups.push_back(make_group(starts, lengths, std::vector<size_t>(order.begin() + static_cast<int64_t>(i),
                                                                     order.begin() + static_cast<int64_t>(i + take)),
                                pow2_at_least(static_cast<int64_t>(take)), padded));
    i += take;
  }
  return groups;
}

}  // namespace anvil
