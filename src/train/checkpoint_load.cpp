// Resuming from a checkpoint (see train/checkpoint_load.h).
#include "train/checkpoint_load.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
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

// Every rank: the verdict on choice.path(), each rank's own `why` (empty: it passed), the
// first rank's that is not empty on every rank. A failure the choice can fall back from is
// returned; any other is refused, naming the newest older complete checkpoint (rank 0 looks
// for it, validating the older ones, and its words go to every rank).
std::string shared_verdict(Comm* comm, const ResumeChoice& choice, const std::string& why) {
  const std::string failed = first_error(comm, why, "checkpoint verdict");
  if (failed.empty() || choice.can_fall_back()) return failed;
  const int rank = comm ? comm->rank() : 0;
  raise(ErrorKind::kInvalidInput,
        first_error(comm, rank == 0 ? checkpoint_refusal(choice.path(), failed) : "", "checkpoint refusal"));
}

// Every rank, once the state is read: the checksum verdict (rank 0's pass over every chunk;
// each other rank's of the chunks it read), shared (point.failed, or the refusal thrown on
// every rank) before the first step.
void await_checksums(ResumePoint& point, const ResumeChoice& choice) {
  const int rank = point.comm ? point.comm->rank() : 0;
  ChecksumVerdict v;
  if (rank == 0)
    v = point.checksums.get();
  else
    v.error = point.reader->checksum_error();
  point.failed = shared_verdict(point.comm, choice, v.error);
  if (!point.failed.empty() || rank != 0) return;
  uint64_t bytes = 0;
  for (const Json& s : point.meta["shards"]) bytes += s["bytes"].get<uint64_t>();
  char line[256];
  std::snprintf(line, sizeof line, "checkpoint %s verified: %.3f GB checksummed in %.2f s (%.2f GB/s)",
                point.path.c_str(), static_cast<double>(bytes) / 1e9, v.seconds,
                static_cast<double>(bytes) / 1e9 / std::max(v.seconds, 1e-9));
  log_info(line);
}

}  // namespace

ResumeChoice::ResumeChoice(const std::string& ckpt_dir, const std::string& resume) {
  if (!resume.empty()) {
    ANVIL_ENSURE(is_directory(resume), kNotFound, "--resume ", resume, ": no such checkpoint folder");
    given_ = true;
    candidates_ = {resume};
    // A --ckpt-dir given for a checkpoint: its newest complete checkpoint, as export takes it.
    if (path_exists(path_join(resume, "meta.json")) || checkpoint_step(resume) >= 0) return;
    const std::vector<std::string> inside = list_checkpoints(resume);
    if (inside.empty()) return;
    log_info("--resume ", resume, " is a folder of checkpoints: resuming from its newest complete one, ", inside.front());
    candidates_ = {inside.front()};
    return;
  }
  if (!ckpt_dir.empty() && is_directory(ckpt_dir)) candidates_ = list_checkpoints(ckpt_dir);
}

const std::string& ResumeChoice::path() const {
  static const std::string none;
  return at_ < candidates_.size() ? candidates_[at_] : none;
}

void ResumeChoice::fall_back(const std::string& why, int rank) {
  failed_.push_back(path());
  ++at_;
  if (rank == 0)
    log_warn("checkpoint ", failed_.back(), " failed its checks: ", why, "; resuming from the next older one, ",
             path());
}

void ResumeChoice::set_aside_failed() const {
  for (const std::string& ckpt : failed_) {
    std::string to = ckpt + ".corrupt";
    for (int i = 2; path_exists(to); ++i) to = cat(ckpt, ".corrupt-", i);
    std::error_code ec;
    std::filesystem::rename(ckpt, to, ec);
    if (ec)
      log_warn("could not rename the failed checkpoint ", ckpt, " (", ec.message(),
               "): it stays, and the next run checks it again");
    else
      log_warn("the failed checkpoint ", ckpt, " is set aside as ", to,
               ", kept for inspection: no run resumes from it and --keep-last does not count it; delete it when done");
  }
}

ResumePoint open_checkpoint(const ResumeChoice& choice, const ParamTable& table, Comm* comm) {
  const int rank = comm ? comm->rank() : 0;
  ResumePoint p;
  p.path = choice.path();
  p.comm = comm;
  // Rank 0 checks every file's size now and its checksums while the state is read (the
  // verdict is awaited before the first step: await_checksums); the verdict goes to every
  // rank, so that every rank falls back or stops alike.
  std::string why;
  if (rank == 0) why = validate_checkpoint(p.path, false).message();
  p.failed = shared_verdict(comm, choice, why);
  if (!p.failed.empty()) return p;
  p.meta = read_checkpoint_meta(p.path);
  check_model(p.path, p.meta, table);
  // Every rank maps every shard file; a header that does not hold the tensors meta.json
  // names fails the checkpoint on every rank.
  try {
    p.reader = std::make_shared<CheckpointReader>(p.path, p.meta, true);
  } catch (const Error& e) {
    why = e.what();
  }
  p.failed = shared_verdict(comm, choice, why);
  if (!p.failed.empty()) return p;
  p.step = p.meta["step"].get<int64_t>();
  p.position.epoch = p.meta["data"].value("epoch", int64_t{0});
  p.position.samples_in_epoch = p.meta["data"].value("samples_in_epoch", int64_t{0});
  p.position.packing = p.meta["data"].value("packing", "wrapped");
  // The chunks the reads touch are hashed as they are read; rank 0 hashes the others beside
  // them, so each byte comes from the disk once (io/shard_checks.h).
  if (rank == 0)
    p.checksums = std::async(std::launch::async, [reader = p.reader] {
      const auto t0 = Clock::now();
      std::string error = reader->check_rest();
      return ChecksumVerdict{std::move(error), seconds_since(t0)};
    });
  return p;
}

UnitReader checkpoint_masters_reader(ResumePoint& point, const ParamTable& table) {
  return [&point, &table](int unit, int64_t begin, int64_t end, float* out) {
    const auto t0 = Clock::now();
    point.reader->read_range(0, table, unit, begin, end, out);
    point.read_seconds += seconds_since(t0);
    point.read_bytes += static_cast<double>(end - begin) * 4;
  };
}

void restore_optimizer(ResumePoint& point, const ResumeChoice& choice, Trainer& trainer) {
  const auto t0 = Clock::now();
  const CheckpointReader& reader = *point.reader;
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
  await_checksums(point, choice);
  point.reader.reset();
  if (!point.failed.empty()) return;
  char line[320];
  std::snprintf(line, sizeof line,
                "resumed from %s at step %lld (saved by %d x %s): this rank loaded %.3f GB in %.2f s (%.2f GB/s)",
                point.path.c_str(), static_cast<long long>(point.step), point.meta["world"].get<int>(),
                point.meta["mode"].get<std::string>().c_str(), point.read_bytes / 1e9, point.read_seconds,
                point.read_bytes / 1e9 / std::max(point.read_seconds, 1e-9));
  log_info(line);
}

}  // namespace anvil
