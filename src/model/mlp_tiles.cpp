// The MLP tile by tile (model/mlp_tiles.h).
#include "model/mlp_tiles.h"

#include <algorithm>

#include "core/error.h"

namespace anvil {

void MlpTiles::forward(const BlockWeights& w, const Activations& a, Tensor x_out) {
  using enum Activation;
  const int64_t N = a[kH2].rows();
  for (int64_t r0 = 0; r0 < N; r0 += tile_) {
    const int64_t r1 = std::min(N, r0 + tile_), rows = r1 - r0;
    const Tensor gate_up = a[kGateUpTile].slice_rows(0, rows), act = a[kAct].slice_rows(0, rows);
    linears_.forward(kGateUpLinear, gate_up, a[kH2].slice_rows(r0, r1), w.gate_up_w, Tensor(), false, r0 > 0);
    ops_.swiglu_forward(act, gate_up);
    linears_.forward(kDownLinear, x_out.slice_rows(r0, r1), act, w.down_w, Tensor(), false, r0 > 0);
  }
}

// Tile by tile the untiled ops on the tile's rows, gate_up recomputed first. The weight
// gradients of the tiles add up in the gradient (the first tile's write overwrites it when
// the step's first write does), or, for bf16 gradients, in mlp_dw, rounded once at the end.
void MlpTiles::backward(const BlockWeights& w, const BlockWeights& g, bool acc, const Activations& a) {
  using enum Activation;
  const bool f32 = g.down_w.dtype == DType::kF32;
  const Tensor& mlp_dw = a[kMlpDw];
  ANVIL_ENSURE(f32 || (mlp_dw.data && !acc), kInternal, "tiled MLP: ", dtype_name(g.down_w.dtype),
               " gradients need the F32 sum of the tiles (mlp_dw) and a first write");
  const Tensor dw_down = f32 ? g.down_w : tensor_at(mlp_dw, 0, g.down_w.shape);
  const Tensor dw_gate_up = f32 ? g.gate_up_w : tensor_at(mlp_dw, g.down_w.numel(), g.gate_up_w.shape);
  const int64_t N = a[kH2].rows();
  for (int64_t r0 = 0; r0 < N; r0 += tile_) {
    const int64_t r1 = std::min(N, r0 + tile_), rows = r1 - r0;
    const Tensor gate_up = a[kGateUpTile].slice_rows(0, rows), act = a[kAct].slice_rows(0, rows);
    const Tensor d_act = a[kDAct].slice_rows(0, rows), d_gate_up = a[kDGateUp].slice_rows(0, rows);
    const Tensor h2 = a[kH2].slice_rows(r0, r1), dy = a[kDx].slice_rows(r0, r1);
    const bool tile_acc = r0 > 0 || acc;
    linears_.forward(kGateUpLinear, gate_up, h2, w.gate_up_w, Tensor(), false, true);
    linears_.backward_input(kDownLinear, d_act, dy, w.down_w);
    ops_.swiglu_backward(d_gate_up, d_act, gate_up, act);
    linears_.backward_weight(kDownLinear, dw_down, Tensor(), dy, act, tile_acc, false);
    linears_.backward_weight(kGateUpLinear, dw_gate_up, Tensor(), d_gate_up, h2, tile_acc, false);
    linears_.backward_input(kGateUpLinear, a[kDh].slice_rows(r0, r1), d_gate_up, w.gate_up_w);
  }
  if (f32) return;
  ops_.runtime().convert(g.down_w, dw_down);
  ops_.runtime().convert(g.gate_up_w, dw_gate_up);
}

}  // namespace anvil
