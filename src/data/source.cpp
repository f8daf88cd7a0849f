// Data sources: spec -> files, and the rows of JSONL and Parquet files (see source.h).
#include "data/source.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>

#include "core/error.h"
#include "core/fs.h"
#include "data/jsonl.h"
#include "data/parquet.h"
#include "data/row_shapes.h"
#include "data/utf8.h"
#include "io/hub.h"

namespace anvil {

namespace {

bool ends_with(const std::string& s, std::string_view tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool is_parquet_name(const std::string& name) { return ends_with(name, ".parquet"); }

bool is_data_name(const std::string& name) {
  return is_parquet_name(name) || ends_with(name, ".jsonl") || ends_with(name, ".jsonl.gz") ||
         ends_with(name, ".jsonl.zst");
}

// The data files directly in dir whose names pass keep, sorted by name.
std::vector<std::string> data_files(const std::string& dir, const std::function<bool(const std::string&)>& keep) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file(ec) && is_data_name(name) && keep(name)) names.push_back(name);
  }
  std::sort(names.begin(), names.end());
  for (std::string& n : names) n = path_join(dir, n);
  return names;
}

std::vector<std::string> hub_dataset_files(const std::string& id, const std::string& split, const std::string& config) {
  std::string looked;
  const std::string snap = find_dataset_snapshot(id, &looked);
  ANVIL_ENSURE(!snap.empty(), kNotFound, "data ", id,
               " is neither a file, a folder nor a dataset in the local Hugging Face cache (looked in ",
               looked.empty() ? std::string(kNoHubCache) : looked,
               "); anvil downloads nothing: fetch it first, e.g. with `huggingface-cli download --repo-type dataset ",
               id, "`");
  const std::string dir = path_join(snap, config.empty() ? std::string("data") : config);
  const std::vector<std::string> files = data_files(dir, [&](const std::string& name) {
    return name.compare(0, split.size() + 1, split + "-") == 0 || name.compare(0, split.size() + 1, split + ".") == 0;
  });
  if (!files.empty()) return files;
  // Say what is there: the splits in that folder, or the configs of the snapshot.
  std::vector<std::string> splits;
  for (const std::string& f : data_files(dir, [](const std::string&) { return true; })) {
    std::string name = std::filesystem::path(f).filename().string();
    name = name.substr(0, std::min(name.find('-'), name.find('.')));
    if (std::find(splits.begin(), splits.end(), name) == splits.end()) splits.push_back(name);
  }
  std::string there;
  for (const std::string& s : splits) there += (there.empty() ? "" : ", ") + s;
  raise(ErrorKind::kNotFound, "data ", id, ": no ", split, "-*.parquet (or .jsonl) files in ", dir,
        there.empty() ? std::string(is_directory(dir) ? "" : " (no such folder; --data-config picks a config folder)")
                      : " (splits there: " + there + "; --split picks one)");
}

}  // namespace

std::vector<std::string> resolve_data_source(const std::string& spec, const std::string& split,
                                             const std::string& config) {
  ANVIL_ENSURE(!spec.empty(), kUsage, "no data given");
  if (is_directory(spec)) {
    std::vector<std::string> files = data_files(spec, [](const std::string&) { return true; });
    ANVIL_ENSURE(!files.empty(), kNotFound, "data folder ", spec, " holds no .parquet or .jsonl[.gz|.zst] files");
    return files;
  }
  if (path_exists(spec)) return {spec};
  // A name with a data file's ending, or under a folder that exists here, is a path: a hub
  // id is neither.
  const std::string parent = std::filesystem::path(spec).parent_path().string();
  ANVIL_ENSURE(looks_like_hub_id(spec) && !is_data_name(spec) && !is_directory(parent), kNotFound, "data ", spec,
               ": no such file or folder");
  return hub_dataset_files(spec, split.empty() ? std::string("train") : split, config);
}

bool is_packed_dataset(const std::string& path) {
  if (is_directory(path)) return path_exists(path_join(path, "packed.bin"));
  return ends_with(path, ".bin");
}

// ---------------------------------------------------------------------------------------
// JSONL

namespace {

bool blank(std::string_view s) {
  return std::all_of(s.begin(), s.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; });
}

class JsonlBatch : public RowBatch {
 public:
  JsonlBatch(const std::string& path) : path_(path) {}
  size_t size() const override { return lines_.size(); }
  OrderedJson row(size_t i) const override { return parse_row(lines_[i]); }
  std::string where(size_t i) const override { return cat(path_, ":", line_numbers_[i]); }

  std::string path_;
  std::vector<std::string> lines_;
  std::vector<int64_t> line_numbers_;
};

class JsonlReader : public RowReader {
 public:
  explicit JsonlReader(const std::string& path) : reader_(path) {}
  std::unique_ptr<RowBatch> next(size_t max_rows, size_t max_bytes) override {
    auto batch = std::make_unique<JsonlBatch>(reader_.path());
    size_t bytes = 0;
    std::string line;
    while (batch->lines_.size() < max_rows && bytes < max_bytes && reader_.next(line)) {
      if (blank(line)) continue;
      bytes += line.size();
      batch->lines_.push_back(std::move(line));
      batch->line_numbers_.push_back(reader_.line_number());
    }
    if (batch->lines_.empty()) return nullptr;
    return batch;
  }

 private:
  LineReader reader_;
};

// ---------------------------------------------------------------------------------------
// Parquet: the `messages` column (list<struct<role, content, ...>>, or ShareGPT's `conversations`
// of {from, value}), the string column `text`, and `prompt`, `completion`, `chosen` and
// `rejected` as strings or as such lists (prompt-completion and preference rows).

// Where a messages leaf's definition levels put each thing (see the rows below).
struct MessagesLayout {
  int node = -1;           // the messages field
  int d_present = 0;       // def >= this: messages is not null
  int d_item = 0;          // def >= this: the list has this element (else it is empty)
  int d_element = 0;       // def >= this: the element is not null
  std::vector<int> leaves;             // role / content, in schema order
  std::vector<std::string> names;      // their field names
};

[[noreturn]] void schema_error(const parquet::File& f, const std::string& column, const std::string& what) {
  raise(ErrorKind::kUnsupported, f.path(), ": column ", column, ": ", what);
}

void check_string_leaf(const parquet::File& f, const parquet::SchemaNode& n) {
  if (n.type != 6) schema_error(f, n.path, cat("type ", parquet::type_name(n.type), ", expected strings (BYTE_ARRAY)"));
}

MessagesLayout messages_layout(const parquet::File& f, int node) {
  const auto& s = f.schema();
  const auto at = [&](int i) -> const parquet::SchemaNode& { return s[static_cast<size_t>(i)]; };
  const parquet::SchemaNode& m = at(node);
  const char* shape = "expected a list of {role, content} (or ShareGPT's {from, value}) structs";
  MessagesLayout l;
  l.node = node;
  int repeated = node;  // the repeated node: messages itself (legacy 2-level) or its only child
  if (m.repetition != parquet::Repetition::kRepeated) {
    if (m.children.size() != 1 || at(m.children[0]).repetition != parquet::Repetition::kRepeated)
      schema_error(f, m.path, shape);
    repeated = m.children[0];
    l.d_present = m.max_def;
  }
  const parquet::SchemaNode& r = at(repeated);
  l.d_item = r.max_def;
  int element = repeated;  // 3-level lists: the repeated group's one child is the element
  if (r.children.size() == 1 && !at(r.children[0]).children.empty()) element = r.children[0];
  const parquet::SchemaNode& e = at(element);
  if (e.children.empty()) schema_error(f, m.path, shape);
  l.d_element = e.max_def;
  for (int c : e.children) {
    const parquet::SchemaNode& leaf = at(c);
    if (leaf.name != "role" && leaf.name != "content" && leaf.name != "from" && leaf.name != "value") continue;
    if (!leaf.children.empty() || leaf.repetition == parquet::Repetition::kRepeated)
      schema_error(f, leaf.path, cat("a nested field, ", shape, " with string fields"));
    check_string_leaf(f, leaf);
    l.leaves.push_back(c);
    l.names.push_back(leaf.name);
  }
  if (l.leaves.empty()) schema_error(f, m.path, cat("no role, content, from or value field; ", shape));
  if (at(l.leaves[0]).max_rep != 1) schema_error(f, m.path, "lists nested in lists; expected a list of structs");
  return l;
}

std::string checked(std::string_view v, const char* what) {
  const size_t bad = utf8_invalid_at(v);
  ANVIL_ENSURE(bad == std::string_view::npos, kInvalidInput, what, " is not valid UTF-8 (byte ", bad, ")");
  return std::string(v);
}

// One decoded row group: the columns read and where each row starts in them.
struct Group {
  struct Column {
    int node = -1;
    int max_def = 0;
    parquet::ColumnData data;
    std::vector<size_t> value_start;  // per row: index of its first value
    std::string name;                 // the JSON key
  };
  // A column of messages lists: its layout, its leaves' columns and where each row's entries start.
  struct Messages {
    std::string name;  // the JSON key
    MessagesLayout layout;
    std::vector<Column> fields;       // parallel to layout.leaves
    std::vector<size_t> entry_start;  // per row + 1: level entries of the leaves
  };
  std::string path;
  int64_t first_row = 0;  // index in the file of row 0
  std::vector<std::string> keys;  // top-level keys in schema order
  std::vector<Messages> lists;    // messages (or conversations), and prompt, completion, chosen, rejected as lists
  std::vector<Column> strings;    // the string columns: text, prompt, completion, chosen, rejected
};

// Row r's list of messages in column m (null where the row has none).
OrderedJson messages_of(const Group::Messages& m, size_t r) {
  const MessagesLayout& l = m.layout;
  const parquet::ColumnData& lead = m.fields[0].data;
  const size_t s = m.entry_start[r], e = m.entry_start[r + 1];
  const int d0 = lead.def[s];
  if (d0 < l.d_present) return nullptr;
  OrderedJson messages = OrderedJson::array();
  if (d0 < l.d_item) return messages;
  std::vector<size_t> vi(m.fields.size());
  for (size_t f = 0; f < vi.size(); ++f) vi[f] = m.fields[f].value_start[r];
  for (size_t k = s; k < e; ++k) {
    if (lead.def[k] < l.d_element) {
      messages.push_back(nullptr);
      continue;
    }
    OrderedJson msg = OrderedJson::object();
    for (size_t f = 0; f < vi.size(); ++f) {
      const Group::Column& c = m.fields[f];
      msg[c.name] = c.data.def[k] == c.max_def ? OrderedJson(checked(c.data.value(vi[f]++), "a message field"))
                                               : OrderedJson();
    }
    messages.push_back(std::move(msg));
  }
  return messages;
}

OrderedJson group_row(const Group& g, size_t r) {
  OrderedJson row = OrderedJson::object();
  for (const std::string& key : g.keys) {
    const auto string_column = std::find_if(g.strings.begin(), g.strings.end(),
                                            [&](const Group::Column& c) { return c.name == key; });
    if (string_column != g.strings.end()) {
      const Group::Column& c = *string_column;
      const bool present = c.max_def == 0 || c.data.def[r] == c.max_def;
      row[key] = present ? OrderedJson(checked(c.data.value(c.value_start[r]), key.c_str())) : OrderedJson();
      continue;
    }
    const auto list = std::find_if(g.lists.begin(), g.lists.end(), [&](const Group::Messages& m) {
      return m.name == key;
    });
    row[key] = messages_of(*list, r);
  }
  return row;
}

class ParquetBatch : public RowBatch {
 public:
  ParquetBatch(std::shared_ptr<const Group> g, size_t begin, size_t end) : g_(std::move(g)), begin_(begin), end_(end) {}
  size_t size() const override { return end_ - begin_; }
  OrderedJson row(size_t i) const override { return group_row(*g_, begin_ + i); }
  std::string where(size_t i) const override {
    return cat(g_->path, ": row ", g_->first_row + static_cast<int64_t>(begin_ + i) + 1);
  }

 private:
  std::shared_ptr<const Group> g_;
  size_t begin_, end_;
};

// The field a Parquet column is read as: the field whose --columns name (by default its own) it has.
std::string field_of(const std::string& column, const ColumnMap& columns) {
  for (const char* f : {"messages", "conversations", "text", "prompt", "completion", "chosen", "rejected"})
    if (columns.key(f) == column) return f;
  return "";
}

class ParquetReader : public RowReader {
 public:
  ParquetReader(const std::string& path, const ColumnMap& columns) : file_(path) {
    bool chat = false;  // messages or conversations (ShareGPT's) read: the first of them only
    for (int c : file_.schema()[0].children) {
      const parquet::SchemaNode& n = file_.schema()[static_cast<size_t>(c)];
      const std::string name = field_of(n.name, columns);
      const bool list = !n.children.empty() || n.repetition == parquet::Repetition::kRepeated;
      const bool either = name == "prompt" || name == "completion" || name == "chosen" || name == "rejected";
      if ((name == "messages" || name == "conversations") && !chat) {
        chat = true;
        lists_.push_back({c, messages_layout(file_, c)});
        keys_.push_back(n.name);
      } else if (either && list) {
        lists_.push_back({c, messages_layout(file_, c)});
        keys_.push_back(n.name);
      } else if (name == "text" || either) {
        if (list) schema_error(file_, n.path, "expected a string column");
        check_string_leaf(file_, n);
        string_nodes_.push_back(c);
        keys_.push_back(n.name);
      }
    }
    if (keys_.empty()) {
      std::string names;
      for (int c : file_.schema()[0].children) names += (names.empty() ? "" : ", ") + file_.schema()[static_cast<size_t>(c)].name;
      raise(ErrorKind::kInvalidInput, path, ": no \"messages\" or \"text\" column (columns: ", names,
            "); Parquet rows are read from the messages, conversations (ShareGPT), text, prompt, completion, "
            "chosen and rejected columns (--columns FIELD=COLUMN reads another)");
    }
  }

  std::unique_ptr<RowBatch> next(size_t max_rows, size_t) override {
    while (!group_ || pos_ >= static_cast<size_t>(rows_)) {
      if (next_group_ >= file_.num_row_groups()) return nullptr;
      load(next_group_++);
    }
    const size_t end = std::min(static_cast<size_t>(rows_), pos_ + max_rows);
    auto batch = std::make_unique<ParquetBatch>(group_, pos_, end);
    pos_ = end;
    return batch;
  }

 private:
  // Reads row group g and indexes where each row starts in each column.
  void load(int g) {
    group_.reset();  // one row group in memory at a time
    auto grp = std::make_shared<Group>();
    grp->path = file_.path();
    grp->first_row = first_row_;
    grp->keys = keys_;
    rows_ = file_.row_group_rows(g);
    first_row_ += rows_;
    pos_ = 0;
    for (int node : string_nodes_) load_string(*grp, g, node);
    for (const auto& [node, layout] : lists_) grp->lists.push_back(load_messages(g, node, layout));
    group_ = std::move(grp);
  }

  [[noreturn]] void fail(int g, int node, const std::string& what) const {
    raise(ErrorKind::kInvalidInput, file_.path(), ": row group ", g, ", column ", file_.schema()[static_cast<size_t>(node)].path,
          ": ", what);
  }

  Group::Column read(int g, int node, const std::string& name) const {
    Group::Column c;
    c.node = node;
    c.name = name;
    c.max_def = file_.schema()[static_cast<size_t>(node)].max_def;
    c.data = file_.read_column(g, node);
    return c;
  }

  // Per row, the index of its first value: values exist only where def == max_def.
  static void index_values(Group::Column& c, const std::vector<size_t>& starts) {
    c.value_start.resize(starts.size());
    size_t v = 0, k = 0;
    for (size_t r = 0; r < starts.size(); ++r) {
      for (; k < starts[r]; ++k) v += c.max_def == 0 || c.data.def[k] == c.max_def;
      c.value_start[r] = v;
    }
  }

  void load_string(Group& grp, int g, int node) const {
    Group::Column c = read(g, node, file_.schema()[static_cast<size_t>(node)].name);
    if (c.data.num_entries != rows_) fail(g, node, cat(c.data.num_entries, " values for ", rows_, " rows"));
    std::vector<size_t> starts(static_cast<size_t>(rows_));
    for (size_t r = 0; r < starts.size(); ++r) starts[r] = r;
    index_values(c, starts);
    grp.strings.push_back(std::move(c));
  }

  // The role/content leaves share the list structure: a row starts at each repetition
  // level 0, and their levels agree down to the element.
  Group::Messages load_messages(int g, int node, const MessagesLayout& layout) const {
    Group::Messages m;
    m.name = file_.schema()[static_cast<size_t>(node)].name;
    m.layout = layout;
    for (size_t f = 0; f < layout.leaves.size(); ++f) m.fields.push_back(read(g, layout.leaves[f], layout.names[f]));
    const parquet::ColumnData& lead = m.fields[0].data;
    for (size_t f = 1; f < m.fields.size(); ++f) {
      const parquet::ColumnData& o = m.fields[f].data;
      bool same = o.rep == lead.rep && o.def.size() == lead.def.size();
      for (size_t k = 0; same && k < o.def.size(); ++k)
        same = std::min<int>(o.def[k], layout.d_element) == std::min<int>(lead.def[k], layout.d_element);
      if (!same) fail(g, layout.leaves[f], "its lists disagree with " + file_.schema()[static_cast<size_t>(layout.leaves[0])].path);
    }
    for (size_t k = 0; k < lead.rep.size(); ++k)
      if (lead.rep[k] == 0) m.entry_start.push_back(k);
    if (static_cast<int64_t>(m.entry_start.size()) != rows_)
      fail(g, layout.leaves[0], cat(m.entry_start.size(), " rows, the row group has ", rows_));
    for (Group::Column& c : m.fields) index_values(c, m.entry_start);
    m.entry_start.push_back(lead.rep.size());
    return m;
  }

  parquet::File file_;
  std::vector<std::pair<int, MessagesLayout>> lists_;  // the messages-list columns: node and layout
  std::vector<int> string_nodes_;  // text, and prompt, completion, chosen, rejected as strings
  std::vector<std::string> keys_;
  std::shared_ptr<const Group> group_;
  int next_group_ = 0;
  int64_t rows_ = 0, first_row_ = 0;
  size_t pos_ = 0;
};

}  // namespace

std::unique_ptr<RowReader> RowReader::open(const std::string& file, const ColumnMap& columns) {
  // Parquet is recognised from its magic, as compressed JSONL is from its own.
  char magic[4] = {};
  if (std::FILE* f = std::fopen(file.c_str(), "rb")) {
    const size_t got = std::fread(magic, 1, 4, f);
    std::fclose(f);
    if (got == 4 && std::memcmp(magic, "PAR1", 4) == 0) return std::make_unique<ParquetReader>(file, columns);
  }
  if (is_parquet_name(file)) return std::make_unique<ParquetReader>(file, columns);  // says what is wrong with it
  return std::make_unique<JsonlReader>(file);
}

}  // namespace anvil
