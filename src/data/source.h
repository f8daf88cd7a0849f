// Where a dataset's rows come from: --data SPEC resolved to the files read, in order, and
// the rows of those files (JSONL or Parquet) handed out in batches.
//
// A spec is
//   - a file: JSONL (plain, .gz, .zst; recognised from its bytes) or .parquet;
//   - a folder of .parquet or .jsonl[.gz|.zst] files, read in name order;
//   - a hub dataset id ORG/NAME in the local Hugging Face cache (io/hub.h):
//     <snapshot>/data/<split>-*.parquet, or <snapshot>/<config>/<split>-*.parquet with a
//     config (JSONL files named so are taken too).
// Rows hold the shapes of data/row_shapes.h (JSONL: any; Parquet: the columns messages, or
// ShareGPT's conversations, text, and prompt and completion as strings); other fields
// (Parquet: other columns) are ignored. A Parquet row becomes the same JSON object its
// JSONL line would parse to, so both go through RowEncoder::encode_row and pack identically.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat_template.h"  // OrderedJson
#include "data/row_shapes.h"    // ColumnMap

namespace anvil {

// The data files of spec, in reading order. Throws kNotFound saying where it looked.
std::vector<std::string> resolve_data_source(const std::string& spec, const std::string& split = "train",
                                             const std::string& config = "");

// True for a folder or file made by `anvil prepare` (a packed.bin), not a data source.
bool is_packed_dataset(const std::string& path);

// A batch of rows of one file. Rows are materialised on demand, so that workers can
// build and encode them in parallel (row() is thread-safe).
class RowBatch {
 public:
  virtual ~RowBatch() = default;
  virtual size_t size() const = 0;
  // Row i as JSON: from JSONL parsed, from Parquet assembled. Throws kInvalidInput (a bad
  // row: the caller says where() and may skip it).
  virtual OrderedJson row(size_t i) const = 0;
  // Where row i is, for messages: "FILE:LINE" (JSONL) or "FILE: row N" (Parquet, 1-based).
  virtual std::string where(size_t i) const = 0;
};

// Reads one file's rows in batches of at most max_rows (JSONL: also about max_bytes).
// Parquet files are memory-mapped and decoded one row group at a time, the columns read by
// their names or the names `columns` (--columns) gives the fields.
class RowReader {
 public:
  static std::unique_ptr<RowReader> open(const std::string& file, const ColumnMap& columns = {});
  virtual ~RowReader() = default;
  // The next batch, or null at the end of the file. A batch owns what it needs.
  virtual std::unique_ptr<RowBatch> next(size_t max_rows, size_t max_bytes) = 0;
};

}  // namespace anvil
