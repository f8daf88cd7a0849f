// Resuming from a checkpoint (see train/checkpoint_load.h).
#include "train/checkpoint_load.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>

#include "comm/first_error.h"
#include "core/duration.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "io/checkpoint_files.h"
#include "train/checkpoint_reader.h"

namespace anvil {
namespace {

using Clock = std::chrono::steady_clock;

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

std::string find_resume_checkpoint(const std::string& ckpt_dir, const std::string& resume) {
  if (!resume.empty()) {
    ANVIL_ENSURE(is_directory(resume), kNotFound, "--resume ", resume, ": no such checkpoint folder");
    // A --ckpt-dir given for a checkpoint: its newest complete checkpoint, as export takes it.
    if (path_exists(path_join(resume, "meta.json")) || checkpoint_step(resume) >= 0) return resume;
    const std::vector<std::string> inside = list_checkpoints(resume);
    if (inside.empty()) return resume;
    log_info("--resume ", resume, " is a folder of checkpoints: resuming from its newest complete one, ", inside.front());
    return inside.front();
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
    if (!st.ok()) error = checkpoint_refusal(path, st.message());
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
      return ChecksumVerdict{st.ok() ? "" : checkpoint_refusal(path, st.message()), seconds_since(t0)};
    });
  return p;
}

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

}  // namespace anvil
