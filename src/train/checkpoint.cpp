#include "train/checkpoint.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <memory>

#include "core/duration.h"
#include "core/env.h"
#include "core/error.h"
#include "core/fault.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/threads.h"
#include "io/checkpoint_files.h"
#include "io/parallel_file.h"
#include "io/safetensors.h"

namespace anvil {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kKinds[3] = {"master", "exp_avg", "exp_avg_sq"};

std::string parent_of(const std::string& path) {
  std::filesystem::path p(path);
  if (p.filename().empty()) p = p.parent_path();
  return p.parent_path().empty() ? "." : p.parent_path().string();
}

// The refusal of a checkpoint: what is wrong (naming the file) and what to do instead.
std::string refusal(const std::string& ckpt, const std::string& why) {
  const std::string older = older_valid_checkpoint(ckpt);
  return cat("checkpoint ", ckpt, " refused: ", why, "; ",
             older.empty() ? std::string("no older complete checkpoint is left beside it")
                           : cat("the newest older complete checkpoint is ", older, " (resume from it with --resume ",
                                 older, ")"));
}
[[noreturn]] void refuse(const std::string& ckpt, const std::string& why) {
  raise(ErrorKind::kInvalidInput, refusal(ckpt, why));
}

Json table_json(const ParamTable& table) {
  Json units = Json::array(), tensors = Json::array();
  for (const UnitInfo& u : table.units()) units.push_back({{"name", u.name}, {"numel", u.numel}, {"padded", u.padded}});
  for (const ParamEntry& e : table.entries()) {
    Json shape = Json::array();
    for (int i = 0; i < e.shape.ndim; ++i) shape.push_back(e.shape[i]);
    tensors.push_back({{"name", e.name}, {"unit", e.unit}, {"offset", e.offset}, {"shape", shape}});
  }
  return {{"units", units}, {"tensors", tensors}};
}

// Throws (naming meta.json and the tensor) when the checkpoint's name table is not the
// model's: every tensor must be there with the same shape, and nothing else.
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

// The shard files of a checkpoint, mapped, and the copy of state by tensor name into any
// layout.
class CheckpointReader {
 public:
  CheckpointReader(const std::string& ckpt, const Json& meta) : ckpt_(ckpt), meta_(meta) {
    world_ = meta["world"].get<int>();
    for (const Json& u : meta["units"]) padded_.push_back(u["padded"].get<int64_t>());
    for (const Json& s : meta["shards"]) files_.push_back(std::make_unique<SafetensorsFile>(path_join(ckpt, s["file"].get<std::string>())));
    for (const Json& t : meta["tensors"])
      place_[t["name"].get<std::string>()] = {t["unit"].get<int>(), t["offset"].get<int64_t>()};
  }

  // Elements [offset, offset + n) of saved unit `unit` of one kind, across shard files.
  void copy(int kind, int unit, int64_t offset, int64_t n, float* out) const {
    const int64_t shard = padded_[static_cast<size_t>(unit)] / world_;
    while (n > 0) {
      const int r = static_cast<int>(offset / shard);
      const int64_t in = offset - r * shard, take = std::min(n, shard - in);
      const std::string name = cat(kKinds[kind], ".", unit);
      const SafeTensorInfo& t = files_[static_cast<size_t>(r)]->get(name);
      ANVIL_ENSURE(t.dtype == DType::kF32 && t.shape.ndim == 1 && t.shape[0] == shard, kInvalidInput,
                   files_[static_cast<size_t>(r)]->path(), ": ", name, " has shape ", t.shape.str(), ", expected [",
                   shard, "] F32");
      const float* src = reinterpret_cast<const float*>(t.data) + in;
      read_ahead(src, static_cast<size_t>(take) * 4);
      std::memcpy(out, src, static_cast<size_t>(take) * 4);
      release_mapped_pages(src, static_cast<size_t>(take) * 4);
      out += take;
      offset += take;
      n -= take;
    }
  }

  // Elements [begin, end) of one unit of `table` of one kind (padding zero), gathered
  // tensor by tensor in pieces of at most 64 MiB, copied in parallel (each read ahead), so
  // that a large tensor (the embedding) is read by every thread too.
  void read_range(int kind, const ParamTable& table, int unit, int64_t begin, int64_t end, float* out) const {
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

  HostUnits read(int kind, const ParamTable& table) const {
    HostUnits units = make_host_units(table);
    for (size_t u = 0; u < units.size(); ++u)
      read_range(kind, table, static_cast<int>(u), 0, table.units()[u].padded, units[u].data());
    return units;
  }

 private:
  std::string ckpt_;
  const Json& meta_;
  int world_ = 1;
  std::vector<int64_t> padded_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<int, int64_t>> place_;
};

// Export holds the whole model on the host (the file is written from it).
void log_peak_host_memory() {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  char line[64];
  std::snprintf(line, sizeof line, "peak host memory %.2f GiB", static_cast<double>(ru.ru_maxrss) / (1024.0 * 1024.0));
  log_info(line);
}

// Rank 0, once every shard is synced: meta.json, then the rename of the temporary folder
// to step-<N> (the moment the checkpoint becomes complete), and the parent folder synced.
void commit_checkpoint(const SavePlace& place, const Json& meta, const std::string& config_toml, int world) {
  if (!config_toml.empty()) write_file_atomic(path_join(place.tmp_dir, "anvil_config.toml"), config_toml);
  write_checkpoint_meta(place.tmp_dir, meta);
  fsync_directory(place.tmp_dir);
  if (fault_armed(Fault::kDieBeforeRename, place.step, 0, world))
    die_at_fault(Fault::kDieBeforeRename, "before renaming " + place.tmp_dir + " to " + place.final_dir);
  std::error_code ec;
  std::filesystem::remove_all(place.final_dir, ec);  // a checkpoint of the same step from an earlier run
  ANVIL_ENSURE(std::rename(place.tmp_dir.c_str(), place.final_dir.c_str()) == 0, kIo, place.final_dir,
               ": rename from ", place.tmp_dir, " failed (", errno_text(), ")");
  fsync_directory(place.ckpt_dir);
}

// Why a save failed, what is left and what the run does: it stops.
[[noreturn]] void save_failed(const std::string& ckpt_dir, int64_t step, const std::string& why) {
  const std::vector<std::string> left = list_checkpoints(ckpt_dir);
  raise(ErrorKind::kIo, "checkpoint ", checkpoint_name(step), " not saved: ", why, "; ",
        left.empty() ? std::string("no earlier checkpoint exists, the run stops with nothing saved")
                     : cat("the run stops; its last good checkpoint is ", left.front(), " (step ",
                           checkpoint_step(left.front()), "), untouched; the same command resumes from it"));
}

}  // namespace

void remove_temporary_files(const std::string& ckpt_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(ckpt_dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (n.rfind(".tmp-step-", 0) == 0 || n.find(".tmp.") != std::string::npos) {
      std::filesystem::remove_all(entry.path(), ec);
      if (!ec) log_info("removed the leftover ", entry.path().string(), " of an interrupted save");
    }
  }
}

void prune_checkpoints(const std::string& ckpt_dir, int64_t keep_last, const std::vector<std::string>& pinned) {
  if (keep_last <= 0) return;
  const std::vector<std::string> kept = list_checkpoints(ckpt_dir);
  for (size_t i = static_cast<size_t>(keep_last); i < kept.size(); ++i) {
    if (std::find(pinned.begin(), pinned.end(), kept[i]) != pinned.end()) continue;
    std::error_code ec;
    std::filesystem::remove_all(kept[i], ec);
    if (ec) log_warn("could not delete the old checkpoint ", kept[i], " (", ec.message(), ")");
  }
}

std::string first_error(Comm* comm, const std::string& mine, std::string_view tag) {
  if (!comm) return mine;
  const auto len = static_cast<size_t>(comm->host_max(static_cast<double>(mine.size()), tag));
  if (len == 0) return "";
  std::string padded = mine;
  padded.resize(len, '\0');
  std::string all(len * static_cast<size_t>(comm->world()), '\0');
  comm->host_all_gather(padded.data(), len, all.data(), tag);
  for (size_t at = 0; at < all.size(); at += len)
    if (all[at] != '\0') return std::string(all.c_str() + at);
  return "";
}

SavePlace begin_save(Comm* comm, const std::string& ckpt_dir, int64_t step) {
  const SavePlace place{ckpt_dir, path_join(ckpt_dir, checkpoint_name(step)),
                        path_join(ckpt_dir, ".tmp-" + checkpoint_name(step)), step};
  std::string error;
  if (!comm || comm->rank() == 0) {
    try {
      make_directories(ckpt_dir);
      remove_temporary_files(ckpt_dir);
      make_directories(place.tmp_dir);
    } catch (const Error& e) {
      error = e.what();
    }
  }
  error = first_error(comm, error, "checkpoint folder");
  if (!error.empty()) save_failed(ckpt_dir, step, error);
  return place;
}

std::vector<ShardTensor> shard_tensors(const ParamTable& table) {
  std::vector<ShardTensor> tensors;
  for (int k = 0; k < 3; ++k)
    for (size_t u = 0; u < table.units().size(); ++u) tensors.push_back({cat(kKinds[k], ".", u), table.units()[u].shard()});
  return tensors;
}

Json checkpoint_meta(Trainer& trainer, const SaveSettings& settings, const DataPosition& position, int world) {
  Json meta = {{"format", kCheckpointFormat}, {"version", kCheckpointVersion}, {"anvil_version", ANVIL_VERSION},
               {"step", trainer.step_count()}, {"world", static_cast<int64_t>(world)},
               {"mode", parallel_mode_name(trainer.store().mode())},
               {"data",
                {{"epoch", position.epoch},
                 {"samples_in_epoch", position.samples_in_epoch},
                 {"packing", position.packing}}},
               {"source", {{"model_dir", settings.model_dir}, {"tokenizer_dir", settings.tokenizer_dir}}},
               {"train", settings.train}};
  meta["config"] = hf_config_json(trainer.config());
  const Json t = table_json(trainer.table());
  meta["units"] = t["units"];
  meta["tensors"] = t["tensors"];
  return meta;
}

namespace {

// The shards' records to every rank (sizes, checksums, write seconds), in rank order.
struct Wire {
  uint64_t bytes;
  char xxh64[16];
  double seconds;
};
std::vector<Wire> gather_records(Comm* comm, const ShardOutcome& mine) {
  Wire w{mine.record.bytes, {}, mine.seconds};
  std::memcpy(w.xxh64, mine.record.xxh64.data(), std::min<size_t>(16, mine.record.xxh64.size()));
  std::vector<Wire> all(comm ? static_cast<size_t>(comm->world()) : 1);
  if (comm) comm->host_all_gather(&w, sizeof w, all.data(), "checkpoint shards");
  else all[0] = w;
  return all;
}

void log_saved(const SaveReport& r, int world, double stall_seconds) {
  char line[400];
  const double rate = r.gigabytes / std::max(r.seconds, 1e-9);
  if (stall_seconds < 0)
    std::snprintf(line, sizeof line, "saved %s: %.3f GB in %.2f s (%.2f GB/s, %d shard%s)", r.path.c_str(),
                  r.gigabytes, r.seconds, rate, world, world == 1 ? "" : "s");
  else
    std::snprintf(line, sizeof line,
                  "saved %s: %.3f GB written in the background in %.2f s (%.2f GB/s, %d shard%s); training "
                  "stalled %.2f s for it",
                  r.path.c_str(), r.gigabytes, r.seconds, rate, world, world == 1 ? "" : "s", stall_seconds);
  log_info(line);
}

}  // namespace

SaveReport gather_shards(Comm* comm, const SavePlace& place, Json& meta, const ShardOutcome& mine,
                         double stall_seconds) {
  const int world = comm ? comm->world() : 1, rank = comm ? comm->rank() : 0;
  const std::string error = first_error(comm, mine.error, "checkpoint shards written");
  if (!error.empty()) {
    std::error_code ec;
    if (rank == 0) std::filesystem::remove_all(place.tmp_dir, ec);
    save_failed(place.ckpt_dir, place.step, error);
  }
  // Sizes and checksums to rank 0, which writes meta.json once every shard is synced.
  const std::vector<Wire> all = gather_records(comm, mine);
  SaveReport report;
  report.path = place.final_dir;
  report.stall_seconds = stall_seconds;
  uint64_t total = 0;
  Json shards = Json::array();
  for (int r = 0; r < world; ++r) {
    const Wire& w = all[static_cast<size_t>(r)];
    shards.push_back({{"file", shard_file_name(r)}, {"rank", r}, {"bytes", w.bytes}, {"xxh64", std::string(w.xxh64, 16)}});
    total += w.bytes;
    report.seconds = std::max(report.seconds, w.seconds);
  }
  if (rank == 0) meta["shards"] = shards;
  report.gigabytes = static_cast<double>(total) / 1e9;
  return report;
}

std::string try_commit(const SavePlace& place, const Json& meta, const std::string& config_toml, int world) {
  try {
    commit_checkpoint(place, meta, config_toml, world);
    return "";
  } catch (const Error& e) {
    std::error_code ec;
    std::filesystem::remove_all(place.tmp_dir, ec);
    return e.what();
  }
}

void conclude_save(Comm* comm, const SavePlace& place, int64_t keep_last, const SaveSettings& settings,
                   const std::string& commit_error, const SaveReport& report, bool background) {
  const std::string error = first_error(comm, commit_error, "checkpoint complete");
  if (!error.empty()) save_failed(place.ckpt_dir, place.step, error);
  if (comm && comm->rank() != 0) return;
  log_saved(report, comm ? comm->world() : 1, background ? report.stall_seconds : -1);
  std::vector<std::string> pinned = settings.pinned;
  pinned.push_back(place.final_dir);  // a resumed run behind newer checkpoints keeps its own
  prune_checkpoints(place.ckpt_dir, keep_last, pinned);
}

SaveReport save_checkpoint(Trainer& trainer, Comm* comm, const CheckpointSection& where, const SaveSettings& settings,
                           const DataPosition& position) {
  const auto t0 = Clock::now();
  const int world = comm ? comm->world() : 1, rank = comm ? comm->rank() : 0;
  const ParamTable& table = trainer.table();
  ParamStore& store = trainer.store();
  const SavePlace place = begin_save(comm, where.dir, trainer.step_count());

  // Rank r's slice [r * shard, (r + 1) * shard) of every unit, wherever it is held.
  const size_t n_units = table.units().size();
  const ParamStore::State state[3] = {ParamStore::State::kMaster, ParamStore::State::kExpAvg,
                                      ParamStore::State::kExpAvgSq};
  ShardOutcome mine;
  try {
    mine.record = write_shard(
        path_join(place.tmp_dir, shard_file_name(rank)), shard_tensors(table),
        [&](size_t i, int64_t begin, int64_t n, float* out) {
          const int u = static_cast<int>(i % n_units);
          const int64_t shard = table.units()[static_cast<size_t>(u)].shard();
          const int64_t at = rank * shard - store.owned_offset(u) + begin;
          store.read_owned(state[i / n_units], u, at, n, out);
        },
        shard_write_fault(place.step, rank, world));
  } catch (const Error& e) {
    mine.error = e.what();
  }
  mine.seconds = seconds_since(t0);
  Json meta = checkpoint_meta(trainer, settings, position, world);
  SaveReport report = gather_shards(comm, place, meta, mine, 0);
  const std::string error = rank == 0 ? try_commit(place, meta, settings.config_toml, world) : "";
  report.seconds = seconds_since(t0);
  conclude_save(comm, place, where.keep_last, settings, error, report, false);
  return report;
}

Fault shard_write_fault(int64_t step, int rank, int world) {
  return fault_armed(Fault::kDieInSave, step, rank, world)       ? Fault::kDieInSave
         : fault_armed(Fault::kNoSpaceInSave, step, rank, world) ? Fault::kNoSpaceInSave
                                                                 : Fault::kNone;
}

std::string find_resume_checkpoint(const std::string& ckpt_dir, const std::string& resume) {
  if (!resume.empty()) {
    ANVIL_ENSURE(is_directory(resume), kNotFound, "--resume ", resume, ": no such checkpoint folder");
    return resume;
  }
  if (ckpt_dir.empty() || !is_directory(ckpt_dir)) return "";
  const std::vector<std::string> found = list_checkpoints(ckpt_dir);
  return found.empty() ? "" : found.front();
}

ResumePoint open_checkpoint(const std::string& path, const ParamTable& table, Comm* comm) {
  const int rank = comm ? comm->rank() : 0;
  // Rank 0 checks every file's size now and its checksum while the state is read (the
  // verdict is awaited before the first step: await_checksums); its verdict goes to every
  // rank, so that whichever rank the launcher reports first says why.
  std::string error;
  if (rank == 0) {
    const Status st = validate_checkpoint(path, false);
    if (!st.ok()) error = refusal(path, st.message());
  }
  error = first_error(comm, error, "checkpoint check");
  if (!error.empty()) raise(ErrorKind::kInvalidInput, error);
  ResumePoint p;
  p.path = path;
  p.comm = comm;
  p.meta = read_checkpoint_meta(path);
  check_model(path, p.meta, table);
  p.step = p.meta["step"].get<int64_t>();
  p.position.epoch = p.meta["data"].value("epoch", int64_t{0});
  p.position.samples_in_epoch = p.meta["data"].value("samples_in_epoch", int64_t{0});
  p.position.packing = p.meta["data"].value("packing", "wrapped");
  if (rank == 0)
    p.checksums = std::async(std::launch::async, [path] {
      const auto t0 = Clock::now();
      const Status st = validate_checkpoint(path);
      return ChecksumVerdict{st.ok() ? "" : refusal(path, st.message()), seconds_since(t0)};
    });
  return p;
}

namespace {

// Every rank, once the state is read: rank 0's checksum verdict, shared; a refusal throws on
// every rank before the first step.
void await_checksums(ResumePoint& point) {
  const int rank = point.comm ? point.comm->rank() : 0;
  ChecksumVerdict v;
  if (rank == 0) v = point.checksums.get();
  const std::string error = first_error(point.comm, v.error, "checkpoint verdict");
  if (!error.empty()) raise(ErrorKind::kInvalidInput, error);
  if (rank != 0) return;
  uint64_t bytes = 0;
  for (const Json& s : point.meta["shards"]) bytes += s["bytes"].get<uint64_t>();
  char line[256];
  std::snprintf(line, sizeof line, "checkpoint %s verified: %.3f GB checksummed in %.2f s (%.2f GB/s)",
                point.path.c_str(), static_cast<double>(bytes) / 1e9, v.seconds,
                static_cast<double>(bytes) / 1e9 / std::max(v.seconds, 1e-9));
  log_info(line);
}

}  // namespace

UnitReader checkpoint_masters_reader(ResumePoint& point, const ParamTable& table) {
  auto reader = std::make_shared<CheckpointReader>(point.path, point.meta);
  return [reader, &point, &table](int unit, int64_t begin, int64_t end, float* out) {
    const auto t0 = Clock::now();
    reader->read_range(0, table, unit, begin, end, out);
    point.read_seconds += seconds_since(t0);
    point.read_bytes += static_cast<double>(end - begin) * 4;
  };
}

void restore_optimizer(ResumePoint& point, Trainer& trainer) {
  const auto t0 = Clock::now();
  const CheckpointReader reader(point.path, point.meta);
  const ParamTable& table = trainer.table();
  ParamStore& store = trainer.store();
  // Only this rank's owned elements are read (a 1/world slice in fsdp), unit by unit.
  auto kind = [&](int k) {
    return [&, k](int unit, int64_t begin, int64_t end, float* out) {
      reader.read_range(k, table, unit, begin, end, out);
      point.read_bytes += static_cast<double>(end - begin) * 4;
    };
  };
  store.load_optimizer_state(kind(1), kind(2));
  trainer.set_step_count(point.step);
  point.read_seconds += seconds_since(t0);
  await_checksums(point);
  char line[320];
  std::snprintf(line, sizeof line,
                "resumed from %s at step %lld (saved by %d x %s): this rank loaded %.3f GB in %.2f s (%.2f GB/s)",
                point.path.c_str(), static_cast<long long>(point.step), point.meta["world"].get<int>(),
                point.meta["mode"].get<std::string>().c_str(), point.read_bytes / 1e9, point.read_seconds,
                point.read_bytes / 1e9 / std::max(point.read_seconds, 1e-9));
  log_info(line);
}

Json hf_config_json(const ModelConfig& config) { return config.raw.is_object() ? config.raw : config_to_json(config); }

std::vector<HfTensor> hf_tensors(const ParamTable& table, const HostUnits& units) {
  std::vector<HfTensor> tensors;
  for (const ParamEntry& e : table.entries())
    tensors.push_back({e.name, e.shape, units[static_cast<size_t>(e.unit)].data() + e.offset});
  return tensors;
}

void export_model(const ModelConfig& config, const ParamTable& table, const HostUnits& units,
                  const HfExportSettings& settings) {
  export_hf_folder(hf_config_json(config), hf_tensors(table, units), settings);
}

void run_export(const ExportOptions& o) {
  ANVIL_ENSURE(!o.ckpt.empty() && !o.out.empty(), kUsage, "anvil export: --ckpt and --out are required");
  ANVIL_ENSURE(o.dtype == "bf16" || o.dtype == "fp32", kUsage, "anvil export: --dtype is bf16 or fp32");
  if (is_directory(o.ckpt) && !path_exists(path_join(o.ckpt, "meta.json")) && checkpoint_step(o.ckpt) < 0) {
    std::string newest;  // a --ckpt-dir given for one of its checkpoints
    for (const std::string& c : list_checkpoints(o.ckpt))
      if (validate_checkpoint(c).ok()) {
        newest = c;
        break;
      }
    ANVIL_ENSURE(newest.empty(), kUsage, "anvil export: ", o.ckpt, " is a checkpoint folder (--ckpt-dir), not one "
                 "checkpoint; its newest complete checkpoint is ", newest, ": anvil export --ckpt ", newest, " --out ", o.out);
  }
  const Status st = validate_checkpoint(o.ckpt);
  if (!st.ok()) refuse(o.ckpt, st.message());
  const Json meta = read_checkpoint_meta(o.ckpt);
  const ModelConfig cfg = config_from_json(meta["config"], path_join(o.ckpt, "meta.json"));
  const ParamTable table(cfg, 1);
  check_model(o.ckpt, meta, table);
  const CheckpointReader reader(o.ckpt, meta);
  const HostUnits masters = reader.read(0, table);
  if (!o.full) {
    HfExportSettings s;
    s.out_dir = o.out;
    s.dtype = o.dtype == "fp32" ? DType::kF32 : DType::kBF16;
    s.max_shard_bytes = o.max_shard_bytes;
    const Json& src = meta.value("source", Json::object());
    s.source_dirs = {src.value("model_dir", ""), src.value("tokenizer_dir", "")};
    if (path_exists(path_join(o.ckpt, "anvil_config.toml"))) s.config_toml = read_file(path_join(o.ckpt, "anvil_config.toml"));
    export_model(cfg, table, masters, s);
    log_peak_host_memory();
    return;
  }
  // One file: the weights under their Hugging Face names and AdamW's m and v beside them.
  const HostUnits m = reader.read(1, table), v = reader.read(2, table);
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  w.set_metadata("anvil_step", std::to_string(meta["step"].get<int64_t>()));
  w.set_metadata("anvil_config", meta["config"].dump());
  for (const ParamEntry& e : table.entries()) {
    w.add(e.name, DType::kF32, e.shape, masters[static_cast<size_t>(e.unit)].data() + e.offset);
    w.add("optimizer.exp_avg." + e.name, DType::kF32, e.shape, m[static_cast<size_t>(e.unit)].data() + e.offset);
    w.add("optimizer.exp_avg_sq." + e.name, DType::kF32, e.shape, v[static_cast<size_t>(e.unit)].data() + e.offset);
  }
  const std::string parent = parent_of(o.out);
  if (!is_directory(parent)) make_directories(parent);
  w.write(o.out);
  log_info("wrote ", o.out, ": weights and AdamW state of step ", meta["step"].get<int64_t>(), " (",
           static_cast<double>(w.total_bytes()) / 1e9, " GB)");
  log_peak_host_memory();
}

}  // namespace anvil
