// Ulysses's layout changes (model/context_parallel.h): pack, all-to-all, unpack.
#include "model/context_parallel.h"

#include <numeric>

#include "core/error.h"

namespace anvil {
namespace {

// The elements of t from `offset` on, as one dimension.
Tensor from(const Tensor& t, int64_t offset) {
  ANVIL_ASSERT(offset >= 0 && offset <= t.numel());
  return Tensor(static_cast<char*>(t.data) + static_cast<size_t>(offset) * dtype_size(t.dtype), t.dtype,
                {t.numel() - offset}, t.device);
}

// The sizes of one change: B sequences, Tl tokens a rank, W wide in tokens, Wc in heads.
struct Dims {
  int64_t B, Tl, W, Wc, chunk;  // chunk: the elements one rank sends another (B x Tl x Wc)
};

Dims dims_of(int64_t batch, int64_t elements, int size, const std::vector<int64_t>& segments) {
  Dims d{};
  d.B = batch;
  d.W = std::accumulate(segments.begin(), segments.end(), int64_t{0});
  for (int64_t w : segments)
    ANVIL_ENSURE(w % size == 0, kInternal, "context parallel: a segment of ", w, " does not split over ", size,
                 " ranks");
  d.Wc = d.W / size;
  ANVIL_ENSURE(elements % (batch * d.W) == 0, kInternal, "context parallel: ", elements, " elements are not ", batch,
               " sequences of rows of ", d.W);
  d.Tl = elements / (batch * d.W);
  d.chunk = d.B * d.Tl * d.Wc;
  return d;
}

}  // namespace

Tensor ContextParallel::staging(Shape shape) const {
  ANVIL_ASSERT(shape.numel() <= send_.numel());
  return Tensor(send_.data, send_.dtype, shape, send_.device);
}

void ContextParallel::exchange(const char* what, int64_t elements) {
  const Tensor out = Tensor(recv_.data, recv_.dtype, {elements}, recv_.device);
  comm_->wait(comm_->all_to_all(out, Tensor(send_.data, send_.dtype, {elements}, send_.device), what));
}

void ContextParallel::to_heads(Ops& ops, Tensor heads, Tensor tokens, int64_t batch,
                               const std::vector<int64_t>& segments) {
  const Dims d = dims_of(batch, tokens.numel(), size_, segments);
  const int64_t rows = d.B * d.Tl, T = d.Tl * size_;
  // Chunk j: part j of every segment, of every token of this rank.
  for (int j = 0; j < size_; ++j) {
    int64_t in_off = 0, out_off = 0;
    for (int64_t w : segments) {
      ops.runtime().copy_rows(from(send_, j * d.chunk + out_off), d.Wc, from(tokens, in_off + j * (w / size_)), d.W, rows,
                    w / size_);
      in_off += w;
      out_off += w / size_;
    }
  }
  exchange("context parallel: tokens to heads", d.chunk * size_);
  // Chunk j came from rank j: its tokens [j Tl, (j+1) Tl) of every sequence.
  for (int j = 0; j < size_; ++j)
    ops.runtime().copy_rows(from(heads, j * d.Tl * d.Wc), T * d.Wc, from(recv_, j * d.chunk), d.Tl * d.Wc, d.B, d.Tl * d.Wc);
}

void ContextParallel::to_tokens(Ops& ops, Tensor tokens, Tensor heads, int64_t batch,
                                const std::vector<int64_t>& segments) {
  const Dims d = dims_of(batch, tokens.numel(), size_, segments);
  const int64_t rows = d.B * d.Tl, T = d.Tl * size_;
  // Chunk j: rank j's tokens of this rank's heads.
  for (int j = 0; j < size_; ++j)
    ops.runtime().copy_rows(from(send_, j * d.chunk), d.Tl * d.Wc, from(heads, j * d.Tl * d.Wc), T * d.Wc, d.B, d.Tl * d.Wc);
  exchange("context parallel: heads to tokens", d.chunk * size_);
  // Chunk j came from rank j: its part j of every segment, for this rank's tokens.
  for (int j = 0; j < size_; ++j) {
    int64_t in_off = 0, out_off = 0;
    for (int64_t w : segments) {
      ops.runtime().copy_rows(from(tokens, out_off + j * (w / size_)), d.W, from(recv_, j * d.chunk + in_off), d.Wc, rows,
                    w / size_);
      in_off += w / size_;
      out_off += w;
    }
  }
}

}  // namespace anvil
