// The Parquet footer: FileMetaData (schema, row groups, column chunks) parsed into File,
// and the schema tree with each leaf's levels and path (see parquet.h).
#include <cstring>
#include <functional>

#include "core/error.h"
#include "data/parquet.h"
#include "data/parquet_thrift.h"

namespace anvil::parquet {
namespace {

struct RawSchemaElement {
  std::string name;
  int32_t type = -1, repetition = 0, num_children = 0, converted_type = -1;
};

File::Chunk parse_column_chunk(Thrift& t, bool* external) {
  File::Chunk c;
  t.read_struct([&](int32_t id, int) {
    if (id == 1) {
      *external = !t.binary().empty();
      return true;
    }
    if (id != 3) return false;
    t.read_struct([&](int32_t m, int) {
      switch (m) {
        case 1: c.type = t.i32(); return true;
        case 4: c.codec = t.i32(); return true;
        case 5: c.num_values = t.zigzag(); return true;
        case 7: c.total_compressed_size = t.zigzag(); return true;
        case 9: c.data_page_offset = t.zigzag(); return true;
        case 11: c.dictionary_page_offset = t.zigzag(); return true;
        default: return false;
      }
    });
    return true;
  });
  return c;
}

RawSchemaElement parse_schema_element(Thrift& t) {
  RawSchemaElement e;
  t.read_struct([&](int32_t f, int) {
    if (f == 4) {
      e.name = std::string(t.binary());
      return true;
    }
    return t.i32_field(f, {{1, &e.type}, {3, &e.repetition}, {5, &e.num_children}, {6, &e.converted_type}});
  });
  return e;
}

File::RowGroup parse_row_group(Thrift& t) {
  File::RowGroup g;
  t.read_struct([&](int32_t f, int) {
    if (f == 1) {
      t.read_list([&](int) {
        bool external = false;
        g.columns.push_back(parse_column_chunk(t, &external));
        if (external) t.fail("a column chunk in another file (file_path) is not supported");
      });
      return true;
    }
    if (f == 3) {
      g.num_rows = t.zigzag();
      return true;
    }
    return false;
  });
  return g;
}

// The schema tree from the footer's depth-first list, with each node's levels and path.
std::vector<SchemaNode> build_schema(const std::vector<RawSchemaElement>& raw, Thrift& t, int* leaves) {
  if (raw.empty()) t.fail("empty schema");
  std::vector<SchemaNode> schema;
  size_t next = 0;
  std::function<int(int, int)> build = [&](int parent, int depth) -> int {
    if (next >= raw.size()) t.fail("schema children past the end of the schema");
    if (depth > 64) t.fail("schema nested too deeply");
    const int id = static_cast<int>(schema.size());
    const RawSchemaElement& e = raw[next++];
    SchemaNode n;
    n.name = e.name;
    n.repetition = static_cast<Repetition>(e.repetition);
    n.converted_type = e.converted_type;
    n.parent = parent;
    if (parent >= 0) {
      const SchemaNode& p = schema[static_cast<size_t>(parent)];
      n.max_def = p.max_def + (n.repetition != Repetition::kRequired ? 1 : 0);
      n.max_rep = p.max_rep + (n.repetition == Repetition::kRepeated ? 1 : 0);
      n.path = p.parent >= 0 ? p.path + "." + e.name : e.name;
    }
    if (n.max_def > 255 || n.max_rep > 255) t.fail("schema nested too deeply");
    if (e.num_children <= 0) {
      n.type = e.type;
      n.column = (*leaves)++;
    }
    schema.push_back(std::move(n));
    for (int k = 0; k < e.num_children; ++k) {
      const int child = build(id, depth + 1);
      schema[static_cast<size_t>(id)].children.push_back(child);
    }
    return id;
  };
  build(-1, 0);
  if (next != raw.size()) t.fail(cat("schema has ", raw.size() - next, " stray elements"));
  return schema;
}

}  // namespace

void File::parse_footer() {
  const std::string& path = path_;
  ANVIL_ENSURE(size_ >= 12 && std::memcmp(data_, "PAR1", 4) == 0, kInvalidInput, path,
               ": not a Parquet file (no PAR1 magic at the start)");
  ANVIL_ENSURE(std::memcmp(data_ + size_ - 4, "PAR1", 4) == 0, kInvalidInput, path,
               ": truncated Parquet file (no PAR1 magic at the end)");
  uint32_t footer_len;
  std::memcpy(&footer_len, data_ + size_ - 8, 4);
  ANVIL_ENSURE(footer_len <= size_ - 12, kInvalidInput, path, ": footer length ", footer_len,
               " is past the start of the file (truncated?)");
  const uint8_t* footer = data_ + size_ - 8 - footer_len;
  Thrift t(footer, data_ + size_ - 8, [this] { return path_ + ": footer"; });

  std::vector<RawSchemaElement> raw;
  t.read_struct([&](int32_t id, int) {
    switch (id) {
      case 2: t.read_list([&](int) { raw.push_back(parse_schema_element(t)); }); return true;
      case 3: num_rows_ = t.zigzag(); return true;
      case 4: t.read_list([&](int) { groups_.push_back(parse_row_group(t)); }); return true;
      default: return false;
    }
  });
  int leaves = 0;
  schema_ = build_schema(raw, t, &leaves);
  for (size_t g = 0; g < groups_.size(); ++g)
    ANVIL_ENSURE(static_cast<int>(groups_[g].columns.size()) == leaves, kInvalidInput, path, ": row group ", g,
                 ": ", groups_[g].columns.size(), " column chunks for ", leaves, " leaf columns");
}

}  // namespace anvil::parquet
