// Row encoding, packing into blocks, the block file and its cache (see packing.h).
#include "data/packing.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/file_lock.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/threads.h"
#include "core/hash.h"
#include "data/block_writer.h"
#include "data/source.h"
#include "data/worker_pool.h"

namespace anvil {

namespace {

constexpr char kMagic[8] = {'A', 'N', 'V', 'I', 'L', 'P', 'K', '1'};
constexpr const char* kFormat = "anvil-packed-v1";       // wrapped
constexpr const char* kFormatBins = "anvil-packed-v2";   // bfd, bfd-split: with the documents
constexpr size_t kPage = 4096;

std::unique_ptr<ChatTemplate> load_template_if_any(const std::string& dir) {
  try {
    return std::make_unique<ChatTemplate>(ChatTemplate::load(dir));
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::kNotFound) return nullptr;
    throw;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------
// PackedDataset

PackedDataset PackedDataset::open(const std::string& path) {
  const std::string file = is_directory(path) ? path_join(path, "packed.bin") : path;
  PackedDataset d;
  d.path_ = file;
  size_t size = 0;
  const int fd = open_read_only(file, &size);
  if (size < 16) {
    ::close(fd);
    raise(ErrorKind::kInvalidInput, file, ": not an anvil packed file (too short)");
  }
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  ANVIL_ENSURE(map != MAP_FAILED, kIo, file, ": mmap failed (", errno_text(), ")");
  d.map_ = map;
  d.map_size_ = size;
  const auto* bytes = static_cast<const char*>(map);
  ANVIL_ENSURE(std::memcmp(bytes, kMagic, 8) == 0, kInvalidInput, file, ": not an anvil packed file (bad magic)");
  uint64_t header_len = 0;
  for (int k = 7; k >= 0; --k) header_len = (header_len << 8) | static_cast<unsigned char>(bytes[8 + k]);
  ANVIL_ENSURE(header_len <= size - 16, kInvalidInput, file, ": header length past the end of the file");
  d.header_ = json_parse(std::string(bytes + 16, header_len), file);
  const std::string format = d.header_.value("format", "");
  ANVIL_ENSURE(format == kFormat || format == kFormatBins, kInvalidInput, file, ": format '", format, "' is not ",
               kFormat, " or ", kFormatBins, " (a file of a newer anvil? prepare it again with this one)");
  d.seq_len_ = d.header_.at("seq_len").get<int64_t>();
  d.num_blocks_ = d.header_.at("num_blocks").get<int64_t>();
  d.has_labels_ = d.header_.at("has_labels").get<bool>();
  d.stride_ = d.header_.at("block_stride").get<int64_t>();
  const auto offset = d.header_.at("data_offset").get<uint64_t>();
  ANVIL_ENSURE(d.stride_ == d.seq_len_ * (d.has_labels_ ? 2 : 1), kInvalidInput, file, ": inconsistent block_stride");
  const uint64_t blocks_end = offset + static_cast<uint64_t>(d.num_blocks_ * d.stride_) * 4;
  ANVIL_ENSURE(offset % 4 == 0 && (format == kFormatBins ? blocks_end <= size : blocks_end == size), kInvalidInput,
               file, ": size ", size, " does not match its header (truncated file?)");
  d.blocks_ = reinterpret_cast<const int32_t*>(bytes + offset);
  if (format == kFormatBins) d.open_documents(size);
  d.preference_ = d.header_.value("preference", false);
  return d;
}

// v2: the packing and the document table after the blocks, checked whole (a block's documents
// fit in it, none is empty), so that a reader can trust every entry.
void PackedDataset::open_documents(size_t size) {
  packing_ = parse_packing(header_.value("packing", ""));
  ANVIL_ENSURE(packing_ != Packing::kWrapped, kInvalidInput, path_, ": a ", kFormatBins, " file packed 'wrapped'");
  const auto at = header_.at("documents_offset").get<uint64_t>();
  const auto docs = header_.at("documents").get<uint64_t>();
  const uint64_t starts = static_cast<uint64_t>(num_blocks_ + 1) * 8;
  ANVIL_ENSURE(at % 8 == 0 && at <= size && starts <= size - at && docs * 4 == size - at - starts, kInvalidInput,
               path_, ": size ", size, " does not match its document table (truncated file?)");
  const auto* bytes = static_cast<const char*>(map_);
  first_document_ = reinterpret_cast<const int64_t*>(bytes + at);
  document_lengths_ = reinterpret_cast<const int32_t*>(bytes + at + starts);
  ANVIL_ENSURE(first_document_[0] == 0 && first_document_[num_blocks_] == static_cast<int64_t>(docs), kInvalidInput,
               path_, ": the document table does not cover its ", docs, " documents");
  for (int64_t b = 0; b < num_blocks_; ++b) {
    ANVIL_ENSURE(first_document_[b] <= first_document_[b + 1], kInvalidInput, path_, ": block ", b,
                 "'s documents are out of order");
    int64_t tokens = 0;
    for (const int32_t n : documents(b)) {
      ANVIL_ENSURE(n >= 1, kInvalidInput, path_, ": block ", b, " holds a document of ", n, " tokens");
      tokens += n;
    }
    ANVIL_ENSURE(tokens <= seq_len_, kInvalidInput, path_, ": block ", b, "'s documents hold ", tokens,
                 " tokens, more than its ", seq_len_);
    ANVIL_ENSURE(!header_.value("preference", false) || (first_document_[b] % 2 == 0 && documents(b).size() % 2 == 0),
                 kInvalidInput, path_, ": block ", b, " splits a preference pair");
  }
}

PackedDataset::PackedDataset(PackedDataset&& o) noexcept { *this = std::move(o); }

PackedDataset& PackedDataset::operator=(PackedDataset&& o) noexcept {
  if (this != &o) {
    if (map_) ::munmap(map_, map_size_);
    path_ = std::move(o.path_);
    header_ = std::move(o.header_);
    map_ = std::exchange(o.map_, nullptr);
    map_size_ = std::exchange(o.map_size_, 0);
    blocks_ = std::exchange(o.blocks_, nullptr);
    first_document_ = std::exchange(o.first_document_, nullptr);
    document_lengths_ = std::exchange(o.document_lengths_, nullptr);
    num_blocks_ = o.num_blocks_;
    seq_len_ = o.seq_len_;
    stride_ = o.stride_;
    has_labels_ = o.has_labels_;
    packing_ = o.packing_;
    preference_ = o.preference_;
  }
  return *this;
}

PackedDataset::~PackedDataset() {
  if (map_) ::munmap(map_, map_size_);
}

const int32_t* PackedDataset::input_ids(int64_t block) const {
  ANVIL_ENSURE(block >= 0 && block < num_blocks_, kInvalidInput, path_, ": block ", block, " out of range [0, ",
               num_blocks_, ")");
  return blocks_ + block * stride_;
}

const int32_t* PackedDataset::labels(int64_t block) const {
  return has_labels_ ? input_ids(block) + seq_len_ : input_ids(block);
}

int64_t PackedDataset::first_document(int64_t block) const {
  ANVIL_ENSURE(first_document_ && block >= 0 && block < num_blocks_, kInvalidInput, path_, ": block ", block,
               " has no document table entry");
  return first_document_[block];
}

std::span<const int32_t> PackedDataset::documents(int64_t block) const {
  if (!first_document_) return {};
  ANVIL_ENSURE(block >= 0 && block < num_blocks_, kInvalidInput, path_, ": block ", block, " out of range [0, ",
               num_blocks_, ")");
  const auto b = static_cast<size_t>(block);
  return {document_lengths_ + first_document_[b], static_cast<size_t>(first_document_[b + 1] - first_document_[b])};
}

// ---------------------------------------------------------------------------------------
// prepare

namespace {

// The cache key, and each data file's hash on the way (hashing reads the whole file: once).
std::string key_and_data_hashes(const PrepareOptions& o, std::vector<std::string>* data_hashes) {
  Xxh64 h;
  h.update(kFormat);
  const std::string tok_file = is_directory(o.tokenizer) ? path_join(o.tokenizer, "tokenizer.json") : o.tokenizer;
  h.update(hash_file(tok_file));
  const std::string dir = is_directory(o.tokenizer) ? o.tokenizer : std::string(".");
  for (const char* extra : {"tokenizer_config.json", "chat_template.jinja"}) {
    const std::string p = path_join(dir, extra);
    h.update(path_exists(p) ? hash_file(p) : std::string("-"));
  }
  for (const std::string& f : o.data) {
    data_hashes->push_back(hash_file(f));
    h.update(data_hashes->back());
  }
  h.update(cat("seq_len=", o.seq_len, ";aol=", o.assistant_only_loss, ";skip=", o.skip_bad_rows));
  // A wrapped file's key is what it was before the bfd packings: those caches are still used.
  if (o.packing != Packing::kWrapped) h.update(cat(";packing=", packing_name(o.packing), ";window=", kBinWindowRows));
  if (!o.completion_only_loss) h.update(";completion_only_loss=0");
  if (!o.columns.empty()) h.update(";columns=" + o.columns);
  if (o.preference) h.update(";preference=1");
  if (o.max_length > 0) h.update(cat(";max_length=", o.max_length));
  const RowHoldout& k = o.holdout;
  if (k.any()) h.update(cat(";holdout=", k.fraction, ",", k.rows, ",", k.seed, ",", k.held_out));
  return h.hex();
}

// What packing counted: each data file's entry for the header, and the totals.
struct PackTally {
  Json files = Json::array();
  int64_t rows = 0, bad_rows = 0, total_tokens = 0;
  int64_t dropped_pairs = 0;  // preference pairs whose prompt alone fills --max-length (TRL drops them too)
  // Rows whose labels are all -100 (kept labels only: nothing in them to learn), and where the first is.
  int64_t rows_without_targets = 0;
  std::string first_without_targets;
};

bool has_target(const TokenizedRow& row) {
  return std::any_of(row.labels.begin(), row.labels.end(), [](int32_t l) { return l != kIgnoreIndex; });
}

// Encodes a batch's rows on the pool's threads: row k's tokens in results[k], or its error in errors[k].
void encode_batch(const RowEncoder& encoder, const RowBatch& batch, WorkerPool& pool,
                  std::vector<TokenizedRow>& results, std::vector<std::string>& errors) {
  const size_t n = batch.size();
  results.resize(n);
  errors.assign(n, std::string());
  pool.run(static_cast<int64_t>(n), [&](int64_t i) {
    const auto k = static_cast<size_t>(i);
    try {
      encoder.encode_row(batch.row(k), results[k]);
    } catch (const std::exception& e) {
      errors[k] = e.what();
    }
  });
}

// Encodes every data file's rows, in order, into the blocks. A bad row stops the run, or with
// --skip-bad-rows is counted (the first few of each file said).
PackTally pack_files(const PrepareOptions& o, const std::vector<std::string>& data_hashes, const RowEncoder& encoder,
                     BlockSink& out) {
  const ColumnMap columns = ColumnMap::parse(o.columns);
  const HoldoutRule side = HoldoutRule::make(o.holdout, o.data, columns);
  int64_t index = 0;  // of the row among all rows read
  WorkerPool pool(hardware_threads());
  PackTally tally;
  constexpr size_t kBatchRows = 4096, kBatchBytes = 16u << 20;
  std::vector<TokenizedRow> results;
  std::vector<std::string> errors;
  for (size_t f = 0; f < o.data.size(); ++f) {
    const std::string& file = o.data[f];
    const std::unique_ptr<RowReader> reader = RowReader::open(file, columns);
    int64_t file_rows = 0, file_bad = 0;
    while (const std::unique_ptr<RowBatch> batch = reader->next(kBatchRows, kBatchBytes)) {
      encode_batch(encoder, *batch, pool, results, errors);
      for (size_t k = 0; k < batch->size(); ++k) {
        if (!side.keeps(index++)) continue;
        if (!errors[k].empty()) {
          ANVIL_ENSURE(o.skip_bad_rows, kUsage, batch->where(k), ": bad row: ", errors[k],
                       " (--skip-bad-rows skips and counts such rows)");
          if (file_bad < 3) log_warn(batch->where(k), ": skipping bad row: ", errors[k]);
          ++file_bad;
          continue;
        }
        if (results[k].dropped) {
          ++tally.dropped_pairs;
          continue;
        }
        ANVIL_ENSURE(results[k].pair_split == 0 || static_cast<int64_t>(results[k].ids.size()) <= o.seq_len, kInvalidInput,
                     batch->where(k), ": the preference pair's chosen and rejected sequences hold ",
                     results[k].pair_split, " + ", results[k].ids.size() - static_cast<size_t>(results[k].pair_split),
                     " tokens, more than --seq-len ", o.seq_len, " (a pair trains in one sequence: a longer --seq-len, "
                     "or --max-length N to keep each sequence's first N tokens as TRL's max_length does)");
        ++file_rows;
        if (!results[k].labels.empty() && !has_target(results[k]) && tally.rows_without_targets++ == 0)
          tally.first_without_targets = batch->where(k);
        tally.total_tokens += static_cast<int64_t>(results[k].ids.size());
        out.append(results[k]);
      }
    }
    if (file_bad > 0) log_warn(file, ": skipped ", file_bad, " bad rows");
    tally.files.push_back({{"path", file}, {"hash", data_hashes[f]}, {"rows", file_rows}, {"bad_rows", file_bad}});
    tally.rows += file_rows;
    tally.bad_rows += file_bad;
  }
  return tally;
}

// Data with no row at all: says which file is empty (or holds only bad rows) rather than
// counting its tokens.
void check_not_empty(const PrepareOptions& o, const PackTally& tally) {
  if (tally.rows > 0) return;
  const std::string what = o.data.size() == 1 ? o.data[0] : cat("the ", o.data.size(), " data files");
  ANVIL_ENSURE(tally.dropped_pairs == 0, kInvalidInput, "prepare: every pair of ", what, " (", tally.dropped_pairs,
               ") is dropped: its prompt alone holds --max-length ", o.max_length, " tokens (as TRL drops such pairs; "
               "a larger --max-length keeps them)");
  ANVIL_ENSURE(!o.holdout.held_out || tally.bad_rows > 0, kInvalidInput, "no row of ", what, " falls in the held-out "
               "set of --eval-fraction ", o.holdout.fraction, ": hold out a larger fraction, or --eval-rows N");
  ANVIL_ENSURE(tally.bad_rows > 0, kInvalidInput, "prepare: ", what, o.data.size() == 1 ? " is" : " are",
               " empty: no rows to train on (one JSON object per line, or Parquet rows)");
  raise(ErrorKind::kInvalidInput, "prepare: every row of ", what, " is bad (", tally.bad_rows, " skipped)");
}

// Rows whose every label is -100 train nothing: refused when no row has a target (the run's
// first step would find none), said when some rows have none.
void check_targets(const PrepareOptions& o, const PackTally& tally) {
  if (tally.rows_without_targets == 0) return;
  const char* why = o.assistant_only_loss ? "--assistant-only-loss keeps the assistant turns' tokens alone"
                                          : "only the completions' tokens are kept";
  ANVIL_ENSURE(tally.rows_without_targets < tally.rows, kInvalidInput, "prepare: no row has a token to learn from (",
               why, ", and no row has one; the first: ", tally.first_without_targets, ")");
  log_warn("prepare: ", tally.rows_without_targets, " of ", tally.rows, " rows have no token to learn from (", why,
           "; the first: ", tally.first_without_targets, ")");
}

// How prepare encodes rows: labels are kept with assistant-only loss, or for the completions
// of prompt-completion data.
RowOptions row_options(const PrepareOptions& o, const ChatTemplate* tmpl) {
  RowOptions r;
  r.assistant_only_loss = o.assistant_only_loss;
  r.completion_only_loss = o.completion_only_loss;
  r.columns = ColumnMap::parse(o.columns);
  r.preference = o.preference;
  r.max_length = o.max_length;
  r.labels = o.assistant_only_loss || o.preference || (o.completion_only_loss && prompt_rows_first(o.data, r.columns));
  r.eos_token = tmpl ? tmpl->eos_token() : std::string();
  return r;
}

// Room for the header (fixed part plus the data file entries), rounded up to a page: where the blocks start.
size_t data_offset_for(const PrepareOptions& o) {
  size_t header_room = 2048;
  for (const auto& f : o.data) header_room += 128 + 2 * f.size();
  return (header_room + kPage - 1) / kPage * kPage;
}

// What the header records, gathered: the options, the tokenizer and template, and what packing made.
struct PackedHeaderInputs {
  const PrepareOptions& o;
  const Tokenizer& tokenizer;
  const ChatTemplate* tmpl;
  const PackTally& tally;
  int64_t blocks;
  bool labels;
  size_t data_offset;
  const std::string& key;
  const BinWriter* bins;  // bfd, bfd-split; null: wrapped
  int32_t pad_id;
};

// bfd, bfd-split: the v2 header's packing, document table and counts.
void add_bin_fields(Json& h, const PackedHeaderInputs& in) {
  const BinStats& st = in.bins->stats();
  const int64_t capacity = in.blocks * in.o.seq_len;
  h["format"] = kFormatBins;
  h["packing"] = packing_name(in.o.packing);
  h["pad_id"] = in.pad_id;
  h["documents"] = st.documents;
  h["documents_offset"] = in.bins->documents_offset();
  h["real_tokens"] = st.real_tokens;
  h["padding_tokens"] = capacity - st.real_tokens;
  h["padding_fraction"] = static_cast<double>(capacity - st.real_tokens) / static_cast<double>(capacity);
  h["split_rows"] = st.split_rows;
  h["dropped_rows"] = st.dropped_rows;
  h["dropped_tokens"] = st.dropped_tokens;
  h["empty_rows"] = st.empty_rows;
  if (in.o.preference) h["preference"] = true;
  if (in.o.max_length > 0) {
    h["max_length"] = in.o.max_length;
    h["dropped_pairs"] = in.tally.dropped_pairs;
  }
}

Json packed_header(const PackedHeaderInputs& in) {
  const int64_t seq = in.o.seq_len;
  Json h = {{"format", kFormat},
          {"seq_len", seq},
          {"num_blocks", in.blocks},
          {"has_labels", in.labels},
          {"block_stride", seq * (in.labels ? 2 : 1)},
          {"dtype", "int32"},
          {"data_offset", in.data_offset},
          {"assistant_only_loss", in.o.assistant_only_loss},
          {"skip_bad_rows", in.o.skip_bad_rows},
          {"tokenizer_hash", in.tokenizer.hash()},
          {"template_hash", in.tmpl ? Json(in.tmpl->hash()) : Json()},
          {"vocab_size", in.tokenizer.vocab_size()},
          {"data", in.tally.files},
          {"rows", in.tally.rows},
          {"bad_rows", in.tally.bad_rows},
          {"total_tokens", in.tally.total_tokens},
          {"dropped_tokens", in.tally.total_tokens - in.blocks * seq},
          {"key", in.key}};
  if (in.bins) add_bin_fields(h, in);
  return h;
}

// The id of padding: the tokenizer's pad token, else its eos token, else 0.
int32_t padding_id(const Tokenizer& tokenizer, const std::string& dir) {
  const OrderedJson config = read_tokenizer_config(dir);
  for (const char* key : {"pad_token", "eos_token"}) {
    const std::string text = special_token_text(config, key);
    if (const auto id = text.empty() ? std::nullopt : tokenizer.token_to_id(text)) return *id;
  }
  return 0;
}

// The writer of o's packing, writing blocks to fd at its position (with the rows' labels).
std::unique_ptr<BlockSink> block_sink(const PrepareOptions& o, int fd, const std::string& path, int32_t pad_id,
                                      bool labels) {
  if (o.packing == Packing::kWrapped) return std::make_unique<WrappedWriter>(fd, path, o.seq_len, labels);
  return std::make_unique<BinWriter>(fd, path, o.seq_len, labels, o.packing == Packing::kBfdSplit, pad_id);
}

// Writes the magic, the header's length (8 bytes, little-endian) and the header at the file's start.
void write_header(int fd, const std::string& path, const Json& header, size_t data_offset) {
  const std::string text = header.dump();
  ANVIL_ENSURE(16 + text.size() <= data_offset, kInternal, "prepare: header larger than its reserved room");
  char prefix[16];
  std::memcpy(prefix, kMagic, 8);
  uint64_t len = text.size();
  for (int k = 0; k < 8; ++k) prefix[8 + k] = static_cast<char>((len >> (8 * k)) & 0xFF);
  ANVIL_ENSURE(::lseek(fd, 0, SEEK_SET) == 0, kIo, path, ": seek failed (", errno_text(), ")");
  write_all(fd, prefix, 16, path);
  write_all(fd, text.data(), text.size(), path);
}

}  // namespace

std::string prepare_key(const PrepareOptions& o) {
  std::vector<std::string> hashes;
  return key_and_data_hashes(o, &hashes);
}

Json prepare_packed(const PrepareOptions& o, const std::string& out_dir) {
  ANVIL_ENSURE(o.seq_len >= 2, kUsage, "prepare: --seq-len must be at least 2, got ", o.seq_len);
  ANVIL_ENSURE(!o.data.empty(), kUsage, "prepare: no --data files");
  ANVIL_ENSURE(!o.preference || o.packing != Packing::kWrapped, kUsage,
               "prepare: preference pairs are packed as documents (--packing bfd or bfd-split), not wrapped");
  ANVIL_ENSURE(o.max_length == 0 || (o.preference && o.max_length > 0), kUsage, "prepare: --max-length ", o.max_length,
               o.preference ? ": must be positive (0: no cut)" : ": cuts preference pairs (--objective dpo) only");
  std::vector<std::string> data_hashes;
  const std::string key = key_and_data_hashes(o, &data_hashes);
  const Tokenizer tokenizer = Tokenizer::load(o.tokenizer);
  const std::string dir = is_directory(o.tokenizer) ? o.tokenizer : std::string(".");
  const std::unique_ptr<ChatTemplate> tmpl = load_template_if_any(dir);
  const RowOptions rows = row_options(o, tmpl.get());
  const bool labels = rows.labels;
  const RowEncoder encoder(tokenizer, tmpl.get(), rows);
  make_directories(out_dir);
  const std::string path = path_join(out_dir, "packed.bin");
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const size_t data_offset = data_offset_for(o);

  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  ANVIL_ENSURE(fd >= 0, kIo, tmp, ": cannot create (", errno_text(), ")");
  try {
    std::vector<char> zeros(data_offset, ' ');
    write_all(fd, zeros.data(), zeros.size(), tmp);
    const int32_t pad_id = o.packing == Packing::kWrapped ? 0 : padding_id(tokenizer, dir);
    const std::unique_ptr<BlockSink> blocks = block_sink(o, fd, tmp, pad_id, labels);
    const PackTally tally = pack_files(o, data_hashes, encoder, *blocks);
    blocks->finish();
    check_not_empty(o, tally);
    check_targets(o, tally);
    ANVIL_ENSURE(blocks->blocks() > 0, kInvalidInput, "prepare: ", tally.total_tokens,
                 " tokens make no block of --seq-len ", o.seq_len, " (more data or a shorter --seq-len)");
    const auto* bins = dynamic_cast<const BinWriter*>(blocks.get());
    const Json header =
        packed_header({o, tokenizer, tmpl.get(), tally, blocks->blocks(), labels, data_offset, key, bins, pad_id});
    write_header(fd, tmp, header, data_offset);
    ANVIL_ENSURE(::fsync(fd) == 0, kIo, tmp, ": sync failed (", errno_text(), ")");
    ::close(fd);
    ANVIL_ENSURE(::rename(tmp.c_str(), path.c_str()) == 0, kIo, path, ": rename failed (", errno_text(), ")");
    return header;
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
}

PackedDataset prepare_cached(const PrepareOptions& o, const std::string& cache_dir) {
  const std::string key = prepare_key(o);
  const std::string dir = path_join(cache_dir, key);
  const std::string file = path_join(dir, "packed.bin");
  // One writer per entry: a second run packing the same data waits for the first and
  // reuses its result; what a killed run left half-written is removed.
  make_directories(dir);
  const FileLock lock = FileLock::wait(path_join(dir, "lock"), cat("the data cache ", dir));
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().filename().string().rfind("packed.bin.tmp.", 0) == 0) {
      std::filesystem::remove(entry.path(), ec);
      log_info("data: removed ", entry.path().string(), ", left by an interrupted preparation");
    }
  if (path_exists(file)) {
    try {
      PackedDataset d = PackedDataset::open(file);
      if (d.header().value("key", "") == key) {
        log_info("data: reusing ", file, " (", d.num_blocks(), " blocks of ", d.seq_len(), " tokens)");
        return d;
      }
    } catch (const Error& e) {
      log_warn("data: cache ", file, " unusable (", e.what(), "), preparing again");
    }
  }
  const Json header = prepare_packed(o, dir);
  log_info("data: prepared ", file, ": ", packing_summary(header));
  return PackedDataset::open(file);
}

std::string packing_summary(const Json& header) {
  const auto num = [&](const char* key) { return header.value(key, int64_t{0}); };
  const std::string packing = header.value("packing", "wrapped");
  if (packing == "wrapped")
    return cat("wrapped: ", num("num_blocks"), " blocks of ", num("seq_len"), " tokens from ", num("rows"), " rows, ",
               num("dropped_tokens"), " tokens dropped at the end");
  char fraction[32];
  std::snprintf(fraction, sizeof fraction, "%.2f%%", 100.0 * header.value("padding_fraction", 0.0));
  return cat(packing, ": ", num("documents"), " documents from ", num("rows"), " rows in ", num("num_blocks"),
             " sequences of ", num("seq_len"), " tokens, ", num("real_tokens"), " real tokens, padding ", fraction,
             ", ", num("split_rows"), " rows split, ", num("dropped_rows"), " rows cut (", num("dropped_tokens"),
             " tokens dropped)",
             header.contains("max_length") ? cat(", ", num("dropped_pairs"), " pairs dropped (the prompt alone holds "
                                                 "--max-length ", num("max_length"), " tokens)") : std::string());
}

}  // namespace anvil
