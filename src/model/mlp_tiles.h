// The MLP in sequence tiles (ALST's TiledMLP; model/activations.h's mlp_tile): per tile of
// tokens the gate/up GEMM, the SwiGLU and the down GEMM, and in the backward each tile's
// gate_up recomputed from h2 before its gradients; the weight gradients add up over the tiles
// (rows of the same sums in the same order on the CPU: the same bits as untiled). Untiled,
// the block (model/block.h) keeps gate_up from its forward.
#pragma once

#include <cstdint>

#include "model/activations.h"
#include "model/block_linears.h"
#include "model/params.h"

namespace anvil {

class MlpTiles {
 public:
  // tile: tokens per tile; at least a pass's rows: untiled.
  MlpTiles(Ops& ops, BlockLinears& linears, int64_t tile) : ops_(ops), linears_(linears), tile_(tile) {}

  int64_t tile() const { return tile_; }
  bool tiled(int64_t rows) const { return tile_ < rows; }
  // x_out = the MLP of a[kH2], tile by tile.
  void forward(const BlockWeights& w, const Activations& a, Tensor x_out);
  // a[kDx] (d loss / d the MLP's output) -> a[kDh] (d loss / d h2) and the MLP's weight
  // gradients g, added (accumulate) or written.
  void backward(const BlockWeights& w, const BlockWeights& g, bool accumulate, const Activations& a);

 private:
  Ops& ops_;
  BlockLinears& linears_;
  int64_t tile_;
};

}  // namespace anvil
