// Checkpoint files: shard writing, meta.json, validation and discovery (see checkpoint_files.h).
#include "io/checkpoint_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>

#include "core/fault.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/log.h"
#include "core/tensor.h"
#include "core/threads.h"
#include "io/parallel_file.h"

namespace anvil {
namespace {

uint64_t file_size(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

// A shard file's layout: the 8-byte header length and the safetensors header (F32 tensors in
// order, padded with blanks to a multiple of 8 bytes), then each tensor's data.
struct ShardLayout {
  explicit ShardLayout(const std::vector<ShardTensor>& tensors) {
    Json header = Json::object();
    uint64_t offset = 0;
    for (const ShardTensor& t : tensors) {
      const uint64_t bytes = static_cast<uint64_t>(t.numel) * 4;
      header[t.name] = {{"dtype", "F32"}, {"shape", {t.numel}}, {"data_offsets", {offset, offset + bytes}}};
      starts.push_back(offset);
      offset += bytes;
    }
    starts.push_back(offset);
    header["__metadata__"] = {{"format", "pt"}};
    std::string text = header.dump();
    while (text.size() % 8 != 0) text.push_back(' ');
    const uint64_t len = text.size();
    prefix.assign(reinterpret_cast<const char*>(&len), 8);
    prefix += text;
    total = prefix.size() + offset;
  }

  // The file's bytes [at, at + n) into out (the tensors' through fill; every chunk boundary
  // falls between elements, as the prefix is a multiple of 8 bytes long).
  void bytes(const ShardFill& fill, uint64_t at, uint64_t n, char* out) const {
    for (; n > 0 && at < prefix.size(); --n) *out++ = prefix[at++];
    uint64_t data = at - prefix.size();
    size_t i = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), data) - starts.begin()) - 1;
    for (; n > 0; ++i) {
      const uint64_t take = std::min(n, starts[i + 1] - data);
      if (take > 0) fill(i, static_cast<int64_t>((data - starts[i]) / 4), static_cast<int64_t>(take / 4),
                         reinterpret_cast<float*>(out));
      out += take;
      data += take;
      n -= take;
    }
  }

  std::string prefix;
  std::vector<uint64_t> starts;  // each tensor's data offset, and the data's end
  uint64_t total = 0;
};

// Writes path through a temporary file beside it: write(fd, record) writes the bytes and
// returns their checksum; the file is synced and renamed into place. On an error the
// temporary file is removed.
ShardRecord write_into_place(const std::string& path, const std::function<std::string(int, ShardRecord&)>& write) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ANVIL_ENSURE(fd >= 0, kIo, tmp, ": cannot create (", errno_text(), ")");
  ShardRecord rec;
  rec.file = std::filesystem::path(path).filename().string();
  try {
    rec.xxh64 = write(fd, rec);
    ANVIL_ENSURE(::fsync(fd) == 0, kIo, path, ": sync failed (", errno_text(), ")");
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  ANVIL_ENSURE(::close(fd) == 0, kIo, path, ": close failed (", errno_text(), ")");
  ANVIL_ENSURE(::rename(tmp.c_str(), path.c_str()) == 0, kIo, path, ": rename failed (", errno_text(), ")");
  return rec;
}

// Writes a shard's bytes to its open file, hashing them (the whole file, and each
// kFileChunk-byte chunk) on the way, and counts them in the record. The fault-injection
// point of the writer (core/fault.h): halfway through the file, exit (a crash) or fail as a
// full disk does.
class ShardWriter {
 public:
  ShardWriter(int fd, const std::string& path, uint64_t total, Fault fault, ShardRecord& rec)
      : fd_(fd), path_(path), total_(total), halfway_(fault == Fault::kNone ? total : total / 2), fault_(fault),
        rec_(rec) {}

  void put(const void* p, size_t n) {
    hash_.update(p, n);
    hash_chunks(static_cast<const char*>(p), n);
    const char* c = static_cast<const char*>(p);
    while (n > 0) {
      const size_t want = std::min<size_t>({n, size_t{1} << 30, static_cast<size_t>(halfway_ - rec_.bytes)});
      ssize_t w = want > 0 ? ::write(fd_, c, want) : 0;
      if (w < 0 && errno == EINTR) continue;
      if (want == 0 && fault_ == Fault::kDieInSave) die_at_fault(fault_, "halfway through " + path_);
      if (want == 0) errno = ENOSPC, w = -1;
      ANVIL_ENSURE(w > 0, kIo, path_, ": write failed (", errno_text(), "): ", total_ - rec_.bytes, " of its ",
                   total_, " bytes missing");
      c += w;
      n -= static_cast<size_t>(w);
      rec_.bytes += static_cast<uint64_t>(w);
    }
  }

  // Once the last byte is put: the last chunk's checksum recorded; the whole file's.
  std::string finish() {
    if (in_chunk_ > 0) rec_.chunks.push_back(chunk_.hex());
    return hash_.hex();
  }

 private:
  void hash_chunks(const char* p, size_t n) {
    while (n > 0) {
      const size_t take = std::min<uint64_t>(n, kFileChunk - in_chunk_);
      chunk_.update(p, take);
      p += take;
      n -= take;
      in_chunk_ += take;
      if (in_chunk_ < kFileChunk) continue;
      rec_.chunks.push_back(chunk_.hex());
      chunk_ = Xxh64();
      in_chunk_ = 0;
    }
  }

  int fd_;
  const std::string& path_;
  uint64_t total_, halfway_;
  Fault fault_;
  ShardRecord& rec_;
  Xxh64 hash_, chunk_;
  uint64_t in_chunk_ = 0;
};

// The tensors' data, in chunks of at most 64 MiB: while one is hashed and written on a second
// thread, the next is filled (downloaded from the device) into the other buffer.
void write_tensor_data(const std::vector<ShardTensor>& tensors, const ShardFill& fill, ShardWriter& out) {
  constexpr int64_t kChunk = int64_t{16} << 20;  // floats
  std::vector<float> bufs[2] = {std::vector<float>(kChunk), std::vector<float>(kChunk)};
  std::future<void> pending;  // joined before an exception leaves
  int turn = 0;
  for (size_t i = 0; i < tensors.size(); ++i)
    for (int64_t begin = 0; begin < tensors[i].numel; begin += kChunk, turn ^= 1) {
      const int64_t n = std::min(kChunk, tensors[i].numel - begin);
      float* buf = bufs[turn].data();
      fill(i, begin, n, buf);
      if (pending.valid()) pending.get();
      pending = std::async(std::launch::async, [&out, buf, n] { out.put(buf, static_cast<size_t>(n) * 4); });
    }
  if (pending.valid()) pending.get();
}

// meta.json is read as the readers use it (validate_checkpoint, check_model, CheckpointReader,
// resume, export): a checkpoint may come from elsewhere, so every field they read is checked
// for its kind and range here, and a wrong one refused naming it, before it is used as an
// index, a divisor or a size.
bool is_count(const Json& j, const char* key, int64_t min = 0) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number_integer() && it->get<int64_t>() >= min;
}

bool is_text(const Json& j, const char* key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_string();
}

void check_meta_fields(const Json& meta, const std::string& path) {
  const auto bad = [&](const char* what) { raise(ErrorKind::kInvalidInput, path, ": ", what); };
  if (!is_count(meta, "step")) bad("\"step\" is not a step number");
  if (!is_count(meta, "world", 1) || meta["world"].get<int64_t>() > (1 << 20)) bad("\"world\" is not a rank count");
  if (!is_text(meta, "mode")) bad("\"mode\" is not a name");
  if (!meta["config"].is_object()) bad("\"config\" is not a config.json object");
  const Json& data = meta["data"];
  if (!data.is_object() || !is_count(data, "epoch") || !is_count(data, "samples_in_epoch") || !is_text(data, "packing"))
    bad("\"data\" is not a data position (epoch, samples_in_epoch, packing)");
  for (const char* key : {"source", "train"})
    if (meta.contains(key) && !meta[key].is_object()) bad("\"source\" or \"train\" is not an object");
  if (meta.contains("source"))
    for (const auto& [k, v] : meta["source"].items())
      if (!v.is_string()) bad("\"source\" holds a folder that is not a string");
}

// Units: {name, numel, padded}, padded a multiple of the world size; tensors: {name, unit,
// offset, shape}, each inside its unit.
void check_units_and_tensors(const Json& meta, const std::string& path) {
  const auto bad = [&](const std::string& what) { raise(ErrorKind::kInvalidInput, path, ": ", what); };
  const int64_t world = meta["world"].get<int64_t>();
  const Json& units = meta["units"];
  if (!units.is_array()) bad("\"units\" is not a list");
  for (const Json& u : units)
    if (!u.is_object() || !is_text(u, "name") || !is_count(u, "numel") || !is_count(u, "padded") ||
        u["padded"].get<int64_t>() < u["numel"].get<int64_t>() || u["padded"].get<int64_t>() % world != 0)
      bad(cat("unit ", u.dump(), " is not {name, numel, padded >= numel, a multiple of ", world, "}"));
  const Json& tensors = meta["tensors"];
  if (!tensors.is_array()) bad("\"tensors\" is not a list");
  for (const Json& t : tensors) {
    bool ok = t.is_object() && is_text(t, "name") && is_count(t, "unit") && is_count(t, "offset") &&
              t["unit"].get<int64_t>() < static_cast<int64_t>(units.size()) && t.contains("shape") &&
              t["shape"].is_array() && t["shape"].size() <= static_cast<size_t>(Shape::kMaxDims);
    int64_t numel = 1;
    for (size_t d = 0; ok && d < t["shape"].size(); ++d) {
      const Json& n = t["shape"][d];
      ok = n.is_number_integer() && n.get<int64_t>() >= 0 && !__builtin_mul_overflow(numel, n.get<int64_t>(), &numel);
    }
    ok = ok && numel <= units[t["unit"].get<size_t>()]["numel"].get<int64_t>() - t["offset"].get<int64_t>();
    if (!ok) bad(cat("tensor ", t.dump(), " is not {name, unit, offset, shape} inside its unit"));
  }
}

// Shards: one {file, bytes, xxh64} per rank, each file a name inside the checkpoint folder, with
// its chunks' checksums where recorded ({chunk_bytes, chunk_xxh64: a list of texts}).
void check_shards(const Json& meta, const std::string& path) {
  const Json& shards = meta["shards"];
  const int64_t world = meta["world"].get<int64_t>();
  ANVIL_ENSURE(shards.is_array() && static_cast<int64_t>(shards.size()) == world, kInvalidInput, path, ": ",
               shards.is_array() ? shards.size() : 0, " shard files for a world of ", world);
  for (const Json& s : shards) {
    const bool named = s.is_object() && is_text(s, "file") && !s["file"].get<std::string>().empty() &&
                       s["file"].get<std::string>().find('/') == std::string::npos && s["file"] != ".." &&
                       s["file"] != ".";
    ANVIL_ENSURE(named && s.contains("bytes") && s["bytes"].is_number_unsigned() && is_text(s, "xxh64"),
                 kInvalidInput, path, ": shard ", s.dump(), " is not {file (a name in the folder), bytes, xxh64}");
    const auto chunks = s.find("chunk_xxh64");
    const bool chunked = chunks == s.end() ||
                         (chunks->is_array() && s.contains("chunk_bytes") && s["chunk_bytes"].is_number_unsigned() &&
                          std::all_of(chunks->begin(), chunks->end(), [](const Json& c) { return c.is_string(); }));
    ANVIL_ENSURE(chunked, kInvalidInput, path, ": shard ", s["file"].get<std::string>(),
                 "'s chunk checksums are not {chunk_bytes, chunk_xxh64: a list of texts}");
  }
}

}  // namespace

std::string checksum_error(const std::string& path, const Json& shard) {
  if (!shard.contains("chunk_xxh64") || shard.value("chunk_bytes", uint64_t{0}) != kFileChunk) {
    const std::string sum = hash_file_parallel(path), want = shard["xxh64"].get<std::string>();
    return sum == want ? "" : cat(path, ": checksum ", sum, " differs from ", want,
                                  " recorded in meta.json (the file is corrupt)");
  }
  const std::vector<std::string> sums = hash_file_chunks(path);
  const Json& want = shard["chunk_xxh64"];
  if (want.size() != sums.size())
    return cat(path, ": ", sums.size(), " chunks of ", kFileChunk, " bytes, meta.json records ", want.size());
  for (size_t i = 0; i < sums.size(); ++i)
    if (sums[i] != want[i].get<std::string>())
      return cat(path, ": checksum ", sums[i], " of bytes [", i * kFileChunk, ", ",
                 std::min<uint64_t>((i + 1) * kFileChunk, shard["bytes"].get<uint64_t>()), ") differs from ",
                 want[i].get<std::string>(), " recorded in meta.json (the file is corrupt)");
  return "";
}

std::string shard_file_name(int rank) {
  char s[40];
  std::snprintf(s, sizeof s, "rank-%05d.safetensors", rank);
  return s;
}

std::string checkpoint_name(int64_t step) { return cat("step-", step); }

ShardRecord write_shard(const std::string& path, const std::vector<ShardTensor>& tensors, const ShardFill& fill,
                        Fault fault) {
  const ShardLayout layout(tensors);
  return write_into_place(path, [&](int fd, ShardRecord& rec) {
    ShardWriter out(fd, path, layout.total, fault, rec);
    out.put(layout.prefix.data(), layout.prefix.size());
    write_tensor_data(tensors, fill, out);
    return out.finish();
  });
}

ShardRecord write_shard_parallel(const std::string& path, const std::vector<ShardTensor>& tensors,
                                 const ShardFill& fill, Fault fault, int threads) {
  const ShardLayout layout(tensors);
  WriteStop stop;
  if (fault == Fault::kDieInSave) stop = {layout.total / 2, [&] { die_at_fault(fault, "halfway through " + path); }};
  if (fault == Fault::kNoSpaceInSave) stop = {layout.total / 2, [] { errno = ENOSPC; }};
  return write_into_place(path, [&](int fd, ShardRecord& rec) {
    FileSums sums = write_hashed(
        fd, path, layout.total, [&](uint64_t at, uint64_t n, char* out) { layout.bytes(fill, at, n, out); }, threads,
        stop);
    rec.bytes = layout.total;
    rec.chunks = std::move(sums.chunks);
    return sums.xxh64;
  });
}

Json read_checkpoint_meta(const std::string& ckpt) {
  const std::string path = path_join(ckpt, "meta.json");
  ANVIL_ENSURE(path_exists(path), kNotFound, path, ": missing (", ckpt, " is not a complete checkpoint)");
  Json meta = json_read_file(path);
  ANVIL_ENSURE(meta.is_object() && meta.contains("format") && meta["format"] == kCheckpointFormat, kInvalidInput, path,
               ": not an anvil checkpoint (no \"format\": \"", kCheckpointFormat, "\")");
  ANVIL_ENSURE(meta.contains("version") && meta["version"] == kCheckpointVersion, kUnsupported, path,
               ": checkpoint version ", meta.value("version", Json()).dump(), ", this anvil reads version ",
               kCheckpointVersion);
  for (const char* key : {"step", "world", "mode", "config", "data", "units", "tensors", "shards"})
    ANVIL_ENSURE(meta.contains(key), kInvalidInput, path, ": no \"", key, "\"");
  check_meta_fields(meta, path);
  check_units_and_tensors(meta, path);
  check_shards(meta, path);
  return meta;
}

void write_checkpoint_meta(const std::string& ckpt, const Json& meta) {
  write_file_atomic(path_join(ckpt, "meta.json"), meta.dump(1));
}

Status validate_checkpoint(const std::string& ckpt, bool verify_checksums) {
  try {
    const Json meta = read_checkpoint_meta(ckpt);
    const Json& shards = meta["shards"];
    std::vector<std::string> errors(shards.size());
    parallel_for(static_cast<int64_t>(shards.size()), 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const Json& s = shards[static_cast<size_t>(i)];
        const std::string path = path_join(ckpt, s["file"].get<std::string>());
        std::string& err = errors[static_cast<size_t>(i)];
        if (!path_exists(path)) {
          err = cat(path, ": missing");
          continue;
        }
        const uint64_t want = s["bytes"].get<uint64_t>(), got = file_size(path);
        if (got != want) {
          err = cat(path, ": ", got, " bytes, meta.json records ", want, got < want ? " (truncated)" : "");
          continue;
        }
        if (!verify_checksums) continue;
        try {
          err = checksum_error(path, s);
        } catch (const Error& x) {
          err = x.what();
        }
      }
    });
    for (const std::string& err : errors)
      if (!err.empty()) return Status(ErrorKind::kInvalidInput, err);
  } catch (const Error& e) {
    return Status::from(e);
  } catch (const std::exception& e) {  // a meta.json of the wrong shape (nlohmann type errors)
    return Status(ErrorKind::kInvalidInput, cat(path_join(ckpt, "meta.json"), ": ", e.what()));
  }
  return Status();
}

int64_t checkpoint_step(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  if (name.empty()) name = std::filesystem::path(path).parent_path().filename().string();
  if (name.size() < 6 || name.compare(0, 5, "step-") != 0) return -1;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9') return -1;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

std::vector<std::string> list_checkpoints(const std::string& ckpt_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(ckpt_dir, ec)) {
    const std::string p = entry.path().string();
    const int64_t step = checkpoint_step(p);
    if (step >= 0 && path_exists(path_join(p, "meta.json"))) found.emplace_back(step, p);
  }
  std::sort(found.begin(), found.end(), [](auto& a, auto& b) { return a.first > b.first; });
  std::vector<std::string> out;
  for (auto& [step, p] : found) out.push_back(p);
  return out;
}

std::string older_valid_checkpoint(const std::string& ckpt) {
  std::filesystem::path p(ckpt);
  if (p.filename().empty()) p = p.parent_path();
  const int64_t step = checkpoint_step(p.string());
  for (const std::string& other : list_checkpoints(p.parent_path().empty() ? "." : p.parent_path().string()))
    if (checkpoint_step(other) < step && validate_checkpoint(other).ok()) return other;
  return "";
}

std::string checkpoint_refusal(const std::string& ckpt, const std::string& why) {
  const std::string older = older_valid_checkpoint(ckpt);
  return cat("checkpoint ", ckpt, " refused: ", why, "; ",
             older.empty() ? std::string("no older complete checkpoint is left beside it")
                           : cat("the newest older complete checkpoint is ", older, " (resume from it with --resume ",
                                 older, ")"));
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ANVIL_ENSURE(fd >= 0, kIo, dir, ": cannot open (", errno_text(), ")");
  const int rc = ::fsync(fd);
  ::close(fd);
  ANVIL_ENSURE(rc == 0, kIo, dir, ": sync failed (", errno_text(), ")");
}

}  // namespace anvil
