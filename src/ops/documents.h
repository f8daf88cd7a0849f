// Documents packed in a micro-batch's sequences, as attention takes them (ops.h): each
// token's position in its document on the ops' device (what RoPE, the CPU reference and
// anvil's attention kernel read), and each document's length on the host, known when the
// micro-batch is built, so that a backend can lay out per-document work (cuDNN's ragged
// attention, ops/attention_ragged.h) without reading the positions back from the device.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace anvil {

struct Documents {
  Tensor positions;              // (B*T) I32; empty: each sequence is one document
  std::vector<int32_t> lengths;  // the documents' lengths in token order (sum B*T); empty: not given

  Documents() = default;
  Documents(Tensor p) : positions(p) {}  // NOLINT(google-explicit-constructor): positions alone
  Documents(Tensor p, std::vector<int32_t> l) : positions(p), lengths(std::move(l)) {}
};

// The lengths of the documents of host positions (a document starts at each position 0).
template <class Int>
std::vector<int32_t> document_lengths(const std::vector<Int>& positions) {
  std::vector<int32_t> lengths;
  for (size_t i = 0; i < positions.size(); ++i) {
    if (positions[i] == 0 || lengths.empty()) lengths.push_back(0);
    ++lengths.back();
  }
  return lengths;
}

}  // namespace anvil
