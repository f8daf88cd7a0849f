// Reading a checkpoint's state by tensor name (see train/checkpoint_reader.h).
#include "train/checkpoint_reader.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "core/fs.h"
#include "core/threads.h"
#include "io/checkpoint_files.h"
#include "io/parallel_file.h"

namespace anvil {
namespace {

// A checkpoint of another model: the checkpoints beside it are that run's, so none of them
// is offered (checkpoint_refusal would name the next older one).
[[noreturn]] void refuse(const std::string& ckpt, const std::string& why) {
  raise(ErrorKind::kInvalidInput, "checkpoint ", ckpt, " refused: ", why, "; the checkpoints beside it are that "
        "model's: give this run a --ckpt-dir of its own, or --resume a checkpoint of this model");
}

}  // namespace

void check_model(const std::string& ckpt, const Json& meta, const ParamTable& table) {
  const std::string file = path_join(ckpt, "meta.json");
  std::map<std::string, const Json*> saved;
  for (const Json& t : meta["tensors"]) saved[t["name"].get<std::string>()] = &t;
  for (const ParamEntry& e : table.entries()) {
    auto it = saved.find(e.name);
    if (it == saved.end()) refuse(ckpt, cat(file, ": the model being trained has ", e.name, ", the checkpoint does not (another model)"));
    Shape s;
    for (const Json& d : (*it->second)["shape"]) {
      if (s.ndim == Shape::kMaxDims) refuse(ckpt, cat(file, ": ", e.name, " has too many dimensions"));
      s.dims[static_cast<size_t>(s.ndim++)] = d.get<int64_t>();
    }
    if (!(s == e.shape))
      refuse(ckpt, cat(file, ": ", e.name, " has shape ", s.str(), " in the checkpoint and ", e.shape.str(),
                 " in the model being trained (another model)"));
    saved.erase(it);
  }
  if (!saved.empty())
    refuse(ckpt, cat(file, ": the checkpoint has ", saved.begin()->first, ", the model being trained does not (another model)"));
}

CheckpointReader::CheckpointReader(const std::string& ckpt, const Json& meta, bool verify) : shards_(meta["shards"]) {
  world_ = meta["world"].get<int>();
  for (const Json& u : meta["units"]) padded_.push_back(u["padded"].get<int64_t>());
  for (const Json& s : shards_) {
    files_.push_back(std::make_unique<SafetensorsFile>(path_join(ckpt, s["file"].get<std::string>())));
    const SafetensorsFile& f = *files_.back();
    checks_.push_back(verify && ShardChecks::recorded(s)
                          ? std::make_unique<ShardChecks>(f.path(), f.bytes(), f.size(), s)
                          : nullptr);
  }
  for (const Json& t : meta["tensors"])
    place_[t["name"].get<std::string>()] = {t["unit"].get<int>(), t["offset"].get<int64_t>()};
  // Every file holds its slice of every unit of every kind (so that a header damaged past
  // its parsing fails here, before a byte is read).
  for (const auto& file : files_)
    for (int kind = 0; kind < 3; ++kind)
      for (size_t u = 0; u < padded_.size(); ++u) {
        const std::string name = cat(kStateKinds[kind], ".", u);
        const int64_t shard = padded_[u] / world_;
        const SafeTensorInfo& t = file->get(name);
        ANVIL_ENSURE(t.dtype == DType::kF32 && t.shape.ndim == 1 && t.shape[0] == shard, kInvalidInput, file->path(),
                     ": ", name, " has shape ", t.shape.str(), ", expected [", shard, "] F32");
      }
}

void CheckpointReader::copy(int kind, int unit, int64_t offset, int64_t n, float* out) const {
  const int64_t shard = padded_[static_cast<size_t>(unit)] / world_;
  while (n > 0) {
    const int r = static_cast<int>(offset / shard);
    const int64_t in = offset - r * shard, take = std::min(n, shard - in);
    const SafeTensorInfo& t = files_[static_cast<size_t>(r)]->get(cat(kStateKinds[kind], ".", unit));
    const float* src = reinterpret_cast<const float*>(t.data) + in;
    if (ShardChecks* c = checks_[static_cast<size_t>(r)].get()) {
      const uint64_t at = static_cast<uint64_t>(reinterpret_cast<const char*>(src) -
                                                static_cast<const char*>(files_[static_cast<size_t>(r)]->bytes()));
      c->check(at, at + static_cast<uint64_t>(take) * 4);
    }
    read_ahead(src, static_cast<size_t>(take) * 4);
    std::memcpy(out, src, static_cast<size_t>(take) * 4);
    release_mapped_pages(src, static_cast<size_t>(take) * 4);
    out += take;
    offset += take;
    n -= take;
  }
}

void CheckpointReader::read_range(int kind, const ParamTable& table, int unit, int64_t begin, int64_t end,
                                  float* out) const {
  constexpr int64_t kPiece = int64_t{16} << 20;  // floats
  std::fill(out, out + (end - begin), 0.0f);
  struct Piece {
    const ParamEntry* entry;
    int64_t lo, hi;
  };
  std::vector<Piece> pieces;
  for (const ParamEntry& e : table.entries())
    if (e.unit == unit && e.offset < end && e.offset + e.numel() > begin)
      for (int64_t lo = std::max(begin, e.offset), hi = std::min(end, e.offset + e.numel()); lo < hi; lo += kPiece)
        pieces.push_back({&e, lo, std::min(hi, lo + kPiece)});
  parallel_for(static_cast<int64_t>(pieces.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Piece& p = pieces[static_cast<size_t>(i)];
      const auto& [u, off] = place_.at(p.entry->name);
      copy(kind, u, off + (p.lo - p.entry->offset), p.hi - p.lo, out + (p.lo - begin));
    }
  });
}

std::string CheckpointReader::checksum_error() const {
  for (const auto& c : checks_)
    if (c && !c->error().empty()) return c->error();
  return "";
}

std::string CheckpointReader::check_rest() const {
  for (size_t i = 0; i < files_.size(); ++i) {
    const std::string why = checks_[i] ? checks_[i]->check_rest(kFileThreads)
                                       : anvil::checksum_error(files_[i]->path(), shards_[i]);
    if (!why.empty()) return why;
  }
  return "";
}

HostUnits CheckpointReader::read(int kind, const ParamTable& table) const {
  HostUnits units = make_host_units(table);
  for (size_t u = 0; u < units.size(); ++u)
    read_range(kind, table, static_cast<int>(u), 0, table.units()[u].padded, units[u].data());
  return units;
}

}  // namespace anvil
