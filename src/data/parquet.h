// A Parquet reader of our own (Debian has no Arrow/Parquet library), for the string
// columns of chat and text datasets.
//
// The file is memory-mapped; its footer (FileMetaData, Thrift compact protocol) is parsed
// once, and columns are decoded one row group at a time. Supported: data pages v1 and v2,
// dictionary pages; PLAIN, RLE/bit-packed levels, RLE_DICTIONARY/PLAIN_DICTIONARY,
// DELTA_BINARY_PACKED (the lengths inside the delta string encodings),
// DELTA_LENGTH_BYTE_ARRAY, DELTA_BYTE_ARRAY; uncompressed, snappy, gzip and zstd pages;
// nested columns through repetition and definition levels. Values are read for BYTE_ARRAY
// leaves (strings) only: any other type, encoding or codec is an error naming it, never a
// guess. Every error names the file, the row group and the column.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace anvil::parquet {

enum class Repetition : int32_t { kRequired = 0, kOptional = 1, kRepeated = 2 };

// One schema element, in the footer's depth-first order; nodes[0] is the root.
struct SchemaNode {
  std::string name;
  int32_t type = -1;  // physical type of a leaf (6: BYTE_ARRAY), -1 for a group
  Repetition repetition = Repetition::kRequired;
  int32_t converted_type = -1;  // 3: LIST, 0: UTF8 ...; -1 when absent
  int parent = -1;
  std::vector<int> children;
  int max_def = 0, max_rep = 0;  // levels of a value at this node (counting the node itself)
  int column = -1;               // leaf: index of its column chunk in a row group
  std::string path;              // dotted, e.g. messages.list.element.content
};

const char* type_name(int32_t physical_type);

// One leaf column of one row group: a level entry per leaf slot (rep and def are empty when
// their maximum is 0) and the non-null values, concatenated, value i being
// bytes[offsets[i], offsets[i + 1]).
struct ColumnData {
  std::vector<uint8_t> def, rep;
  std::string bytes;
  std::vector<uint64_t> offsets{0};
  int64_t num_entries = 0;
  size_t num_values() const { return offsets.size() - 1; }
  std::string_view value(size_t i) const { return {bytes.data() + offsets[i], offsets[i + 1] - offsets[i]}; }
};

class File {
 public:
  explicit File(const std::string& path);  // maps the file and parses the footer
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  const std::string& path() const { return path_; }
  int64_t num_rows() const { return num_rows_; }
  int num_row_groups() const { return static_cast<int>(groups_.size()); }
  int64_t row_group_rows(int g) const { return groups_[static_cast<size_t>(g)].num_rows; }
  const std::vector<SchemaNode>& schema() const { return schema_; }
  // The node of a top-level field, or -1.
  int top_level(std::string_view name) const;

  // Decodes leaf `node` (an index into schema()) of row group g.
  ColumnData read_column(int g, int node) const;

  struct Chunk {  // a column chunk's metadata
    int32_t type = -1, codec = 0;
    int64_t num_values = 0, data_page_offset = -1, dictionary_page_offset = -1, total_compressed_size = 0;
  };
  struct RowGroup {
    int64_t num_rows = 0;
    std::vector<Chunk> columns;
  };

 private:
  void parse_footer();
  std::string path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  int64_t num_rows_ = 0;
  std::vector<SchemaNode> schema_;
  std::vector<RowGroup> groups_;
};

}  // namespace anvil::parquet
