// DPO's reference log-probs, their pass and their cache: see train/dpo_reference.h.
#include "train/dpo_reference.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/duration.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/log.h"
#include "io/hub.h"
#include "model/weights.h"

namespace anvil {
namespace {

constexpr char kMagic[8] = {'A', 'N', 'V', 'I', 'L', 'R', 'E', 'F'};

// The reference's identity: config.json's bytes and each weight file's name, size and time.
std::string model_identity(const std::string& dir) {
  Xxh64 h;
  h.update(hash_file(path_join(dir, "config.json")));
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    if (e.path().extension() == ".safetensors") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files)
    h.update(cat(f.filename().string(), ":", std::filesystem::file_size(f), ":",
                 std::filesystem::last_write_time(f).time_since_epoch().count(), ";"));
  return h.hex();
}

std::string cache_file(const BlockSource& data, const std::string& reference) {
  Xxh64 h;
  h.update(data.prepared_key());
  h.update(reference);
  return path_join(std::filesystem::path(data.prepared_file()).parent_path().string(), "ref-" + h.hex() + ".bin");
}

bool read_cache(const std::string& path, int64_t pairs, ReferenceLogps& out) {
  std::ifstream in(path, std::ios::binary);
  char magic[8];
  int64_t n = 0;
  if (!in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0 || !in.read(reinterpret_cast<char*>(&n), 8) ||
      n != pairs)
    return false;
  std::vector<double> v(static_cast<size_t>(2 * n));
  if (!in.read(reinterpret_cast<char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(double))))
    return false;
  for (size_t k = 0; k < v.size(); k += 2) out.chosen.push_back(v[k]), out.rejected.push_back(v[k + 1]);
  return true;
}

void write_cache(const std::string& path, const ReferenceLogps& r) {
  std::string bytes(kMagic, 8);
  const auto n = static_cast<int64_t>(r.chosen.size());
  bytes.append(reinterpret_cast<const char*>(&n), 8);
  for (size_t k = 0; k < r.chosen.size(); ++k) {
    bytes.append(reinterpret_cast<const char*>(&r.chosen[k]), 8);
    bytes.append(reinterpret_cast<const char*>(&r.rejected[k]), 8);
  }
  write_file_atomic(path, bytes);
}

// The pass over one source: rank r takes micro-batches r, r + world, ... (the last padded with
// blocks of no pair), then the ranks' pairs are gathered.
ReferenceLogps compute(Trainer& t, Comm* comm, const BlockSource& data, int64_t micro_batch, bool log) {
  const int64_t world = t.data_world(), rank = t.data_rank(), blocks = data.size(), pairs = data.pairs();
  const int64_t per_round = micro_batch * world, rounds = (blocks + per_round - 1) / per_round;
  std::vector<double> mine(static_cast<size_t>(2 * pairs), 0.0);
  const auto start = std::chrono::steady_clock::now();
  auto last = start;
  for (int64_t k = 0; k < rounds; ++k) {
    TokenBatch batch;
    for (int64_t b = 0; b < micro_batch; ++b) {
      const int64_t block = (k * world + rank) * micro_batch + b;
      if (block < blocks) {
        data.append(block, batch);
        continue;
      }
      batch.ids.resize(batch.ids.size() + static_cast<size_t>(data.seq_len()), 0);
      batch.labels.resize(batch.ids.size(), -100);
      for (int64_t p = 0; p < data.seq_len(); ++p) batch.positions.push_back(p);
      batch.padding += data.seq_len();
    }
    const std::vector<PairLogps> lp = t.pair_logps(batch);
    for (size_t p = 0; p < lp.size(); ++p) {
      const auto i = static_cast<size_t>(batch.pairs[p].index);
      mine[2 * i] = lp[p].chosen;
      mine[2 * i + 1] = lp[p].rejected;
    }
    const auto now = std::chrono::steady_clock::now();
    if (log && now - last >= std::chrono::seconds(10)) {
      last = now;
      const double spent = std::chrono::duration<double>(now - start).count();
      log_info("reference log-probs: ", std::min(blocks, (k + 1) * per_round), "/", blocks, " blocks, ETA ",
               format_hms(spent / static_cast<double>(k + 1) * static_cast<double>(rounds - k - 1)));
    }
  }
  if (comm) {  // each pair was computed by one rank, zeros elsewhere: the sum is every rank's
    std::vector<double> all(mine.size() * static_cast<size_t>(comm->world()));
    comm->host_all_gather(mine.data(), mine.size() * sizeof(double), all.data(), "reference log-probs");
    std::fill(mine.begin(), mine.end(), 0.0);
    for (size_t r = 0; r < all.size(); r += mine.size())
      for (size_t i = 0; i < mine.size(); ++i) mine[i] += all[r + i];
  }
  if (log) {
    char done[96];
    std::snprintf(done, sizeof done, "reference log-probs: %lld pairs in %.1f s",
                  static_cast<long long>(pairs), seconds_since(start));
    log_info(done);
  }
  ReferenceLogps out;
  for (size_t i = 0; i < mine.size(); i += 2) out.chosen.push_back(mine[i]), out.rejected.push_back(mine[i + 1]);
  return out;
}

}  // namespace

std::vector<ReferenceLogps> reference_logps(const TrainConfig& c, OpenRun& run,
                                            const std::vector<const BlockSource*>& sources) {
  const std::string dir = !c.dpo.ref_model.empty() ? resolve_model_dir(c.dpo.ref_model) : run.model_dir;
  const std::string reference = dir.empty() ? cat("preset ", c.model.preset, " seed ", c.seed) : model_identity(dir);
  std::vector<ReferenceLogps> out(sources.size());
  std::vector<size_t> missing;
  for (size_t s = 0; s < sources.size(); ++s)
    if (!read_cache(cache_file(*sources[s], reference), sources[s]->pairs(), out[s])) missing.push_back(s);
  Comm* comm = run.comm.get();
  const bool all_read = (comm ? comm->host_sum(static_cast<int64_t>(missing.size()), "reference caches")
                              : static_cast<int64_t>(missing.size())) == 0;
  if (all_read) {
    if (run.rank == 0) log_info("reference log-probs: read from the cache beside the data");
    return out;
  }
  const ModelConfig ref_config = dir.empty() ? run.config : load_config(dir);
  ANVIL_ENSURE(ref_config.vocab_size == run.config.vocab_size, kInvalidInput, "--ref-model ", c.dpo.ref_model,
               " has a vocabulary of ", ref_config.vocab_size, ", the model ", run.config.vocab_size);
  const ParamTable table(ref_config, run.world);
  HostUnits fresh;
  UnitReader weights;
  if (dir.empty()) {
    fresh = make_host_units(table);
    init_weights(ref_config, table, static_cast<uint64_t>(c.seed), fresh);
    weights = host_units_reader(fresh);
  } else {
    weights = hf_weights_reader(dir, table);
  }
  if (run.rank == 0) log_info("reference log-probs: one forward pass of ", dir.empty() ? "the preset" : dir);
  // The reference's Trainer lives for the pass only: training holds one model.
  const std::unique_ptr<Trainer> t =
      make_trainer(ref_config, weights, c, sources[0]->seq_len(), comm, comm ? comm->gpu() : run.comm_options.local_rank);
  for (size_t s = 0; s < sources.size(); ++s) {
    out[s] = compute(*t, comm, *sources[s], c.data.micro_batch, run.rank == 0);
    if (run.rank == 0) write_cache(cache_file(*sources[s], reference), out[s]);
  }
  return out;
}

}  // namespace anvil
