// Block sources and the order the steps read them in: see data/blocks.h.
#include "data/blocks.h"

#include <algorithm>

#include "core/env.h"
#include "core/error.h"
#include "core/fs.h"
#include "data/source.h"

namespace anvil {

DataKind data_kind(const std::string& source) {
  if (source.size() > 12 && source.compare(source.size() - 12, 12, ".safetensors") == 0) return DataKind::kSafetensors;
  if (is_packed_dataset(source)) return DataKind::kPacked;
  return DataKind::kRows;  // JSONL, Parquet, a folder of them, a hub dataset id (data/source.h)
}

std::string data_cache_dir(const DataSection& d) {
  return !d.cache.empty() ? d.cache
         : !env_str("XDG_CACHE_HOME", "").empty() ? path_join(env_str("XDG_CACHE_HOME", ""), "anvil")
                                                   : path_join(env_str("HOME", "."), ".cache/anvil");
}

BlockSource::BlockSource(const DataSection& d, const std::string& source, const std::string& split,
                         const std::string& model_dir, const PrepareTurn& turn, const RowHoldout& holdout) {
  if (data_kind(source) == DataKind::kSafetensors) {
    ANVIL_ENSURE(d.objective != Objective::kDpo, kInvalidInput, source,
                 ": --objective dpo trains on preference rows (JSONL, Parquet, a hub dataset), not input_ids");
    open_safetensors(source);
    return;
  }
  if (data_kind(source) == DataKind::kPacked) {
    ANVIL_ENSURE(d.max_length == 0, kUsage, source, ": --max-length cuts rows as they are prepared, and these are "
                 "prepared already (anvil prepare --max-length)");
    packed_ = std::make_unique<PackedDataset>(PackedDataset::open(source));
  } else {
    PrepareOptions p;
    p.tokenizer = !d.tokenizer.empty() ? d.tokenizer : model_dir;
    p.data = resolve_data_source(source, split.empty() ? d.split : split, d.config);
    p.seq_len = d.seq_len;
    p.packing = d.packing;
    p.assistant_only_loss = d.assistant_only_loss;
    p.completion_only_loss = d.completion_only_loss;
    p.columns = d.columns;
    p.holdout = holdout;
    p.skip_bad_rows = d.skip_bad_rows;
    p.preference = d.objective == Objective::kDpo;
    p.max_length = d.max_length;
    const std::string cache = data_cache_dir(d);
    // The first process prepares; the others open what it wrote.
    if (turn.first) packed_ = std::make_unique<PackedDataset>(prepare_cached(p, cache));
    if (turn.barrier) turn.barrier();
    if (!packed_) packed_ = std::make_unique<PackedDataset>(prepare_cached(p, cache));
  }
  n_ = packed_->num_blocks();
  t_ = packed_->seq_len();
  ANVIL_ENSURE(packed_->preference() == (d.objective == Objective::kDpo), kInvalidInput, source,
               packed_->preference() ? ": holds preference pairs, which train with --objective dpo"
                                     : ": --objective dpo trains on preference pairs, and these blocks hold none");
  ANVIL_ENSURE(n_ >= 1, kInvalidInput, source, ": no complete block of ", t_, " tokens");
}

void BlockSource::open_safetensors(const std::string& source) {
  file_ = std::make_unique<SafetensorsFile>(source);
  const SafeTensorInfo* ids = file_->find("input_ids");
  ANVIL_ENSURE(ids, kNotFound, source, ": no tensor input_ids");
  ANVIL_ENSURE(ids->shape.ndim == 2 && ids->shape[1] >= 2 && ids->shape[0] >= 1, kInvalidInput, source,
               ": input_ids has shape ", ids->shape.str(), ", expected [N, T] with T >= 2");
  ids_ = read_as_i64(*ids);
  n_ = ids->shape[0];
  t_ = ids->shape[1];
}

int64_t BlockSource::pairs() const {
  if (!packed_ || !packed_->preference()) return 0;
  return packed_->header().value("documents", int64_t{0}) / 2;
}

std::string BlockSource::prepared_file() const {
  ANVIL_ENSURE(packed_ != nullptr, kInternal, "safetensors blocks have no prepared file");
  return packed_->path();
}

std::string BlockSource::prepared_key() const {
  ANVIL_ENSURE(packed_ != nullptr, kInternal, "safetensors blocks have no prepared file");
  return packed_->header().value("key", "");
}

std::string BlockSource::summary() const {
  return packed_ ? packing_summary(packed_->header()) : cat("wrapped: ", n_, " blocks of ", t_, " tokens (input_ids)");
}

void BlockSource::append(int64_t block, TokenBatch& b) const {
  if (!packed_) {
    auto first = ids_.begin() + block * t_;
    b.ids.insert(b.ids.end(), first, first + t_);
    return;
  }
  const int32_t* ids = packed_->input_ids(block);
  b.ids.insert(b.ids.end(), ids, ids + t_);
  const int32_t* lab = packed_->labels(block);
  if (packed_->packing() == Packing::kWrapped) {
    if (packed_->has_labels()) b.labels.insert(b.labels.end(), lab, lab + t_);
    return;
  }
  int64_t real = 0;
  const std::span<const int32_t> docs = packed_->documents(block);
  const int64_t at = static_cast<int64_t>(b.ids.size()) - t_;  // the block's first token in the batch
  for (size_t d = 0; d < docs.size(); ++d) {
    if (packed_->preference() && d % 2 == 0)  // pair d / 2 of the block: documents d (chosen) and d + 1 (rejected)
      b.pairs.push_back({(packed_->first_document(block) + static_cast<int64_t>(d)) / 2, at + real, docs[d],
                         at + real + docs[d], docs[d + 1]});
    for (int64_t k = 0; k < docs[d]; ++k) b.positions.push_back(k);
    real += docs[d];
  }
  for (int64_t k = 0; k < t_ - real; ++k) b.positions.push_back(k);
  b.labels.insert(b.labels.end(), lab, lab + real);
  b.labels.insert(b.labels.end(), static_cast<size_t>(t_ - real), kIgnoreIndex);
  b.padding += t_ - real;
}

BatchOrder::BatchOrder(const DataSection& d, int64_t seed, const BlockSource& blocks, int world, int rank)
    : sampler_(blocks.size(), world, rank, static_cast<uint64_t>(seed), d.shuffle, true),
      packing_(blocks.packing()),
      reset_position_(d.reset_position),
      world_(world),
      per_step_(d.micro_batch * d.grad_accum),
      epoch_len_(sampler_.num_samples() / per_step_ * per_step_) {}

void BatchOrder::resume_at(const DataPosition& p, int64_t step) {
  ANVIL_ENSURE(reset_position_ || p.packing == packing_name(packing_), kUsage, "the checkpoint's data position counts ",
               p.packing, " blocks, and this run's blocks are packed ", packing_name(packing_),
               ": it means other blocks here. Resume with --packing ", p.packing,
               ", or give --reset-data-position to read the blocks from the start (weights and optimizer resume)");
  start_ = step;
  first_index_ = reset_position_ ? 0 : p.epoch * epoch_len_ + std::min(p.samples_in_epoch / world_, epoch_len_);
}

int64_t BatchOrder::block(int64_t step, int64_t i) {
  const int64_t index = first_index_ + (step - start_ - 1) * per_step_ + i;
  const int64_t e = index / epoch_len_;
  if (e != epoch_) {
    epoch_ = e;
    sampler_.set_epoch(e);
    mine_ = sampler_.indices();
  }
  return mine_[static_cast<size_t>(index % epoch_len_)];
}

DataPosition BatchOrder::after(int64_t step) const {
  const int64_t next = first_index_ + (step - start_) * per_step_;
  return {next / epoch_len_, (next % epoch_len_) * world_, packing_name(packing_)};
}

}  // namespace anvil
