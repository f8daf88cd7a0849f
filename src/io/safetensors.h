// safetensors: read through mmap (one file, or a sharded folder with
// model.safetensors.index.json) and write.
//
// Format: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape,
// data_offsets: [begin, end]}, "__metadata__": {...}}, then the data. Every tensor's byte
// range is checked against its dtype and shape and against the file size when the file is
// opened, so a truncated file or a bad header is an error naming the file (and tensor)
// before any data is used.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/tensor.h"

namespace anvil {

struct SafeTensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  const uint8_t* data = nullptr;  // inside the mapping
  size_t bytes = 0;
};

class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<SafeTensorInfo>& tensors() const { return tensors_; }
  const SafeTensorInfo* find(const std::string& name) const;
  const SafeTensorInfo& get(const std::string& name) const;  // throws kNotFound naming the file
  const Json& metadata() const { return metadata_; }
  const void* bytes() const { return map_; }  // the whole file, mapped read-only
  size_t size() const { return size_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::vector<SafeTensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  Json metadata_;
};

// All the safetensors files of a model folder, by tensor name.
class SafetensorsSet {
 public:
  explicit SafetensorsSet(const std::string& dir);  // model.safetensors or the index's shards
  const SafeTensorInfo* find(const std::string& name) const;
  // The tensor converted to float (from F32, BF16, F16, F64); throws naming the file and
  // tensor when it is missing or its shape differs from `shape`.
  void read_f32(const std::string& name, const Shape& shape, float* out) const;
  std::vector<std::string> names() const;
  std::string file_of(const std::string& name) const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, std::pair<size_t, const SafeTensorInfo*>> where_;
};

// Drops the whole pages inside [data, data + bytes) of a read-only mapping from this
// process's resident memory (the page cache keeps them; a later read faults them back):
// a rank that streams its share of a large file unit by unit does not keep the file mapped
// in its RSS.
void release_mapped_pages(const void* data, size_t bytes);

// Converts n elements of src (any float dtype) to float.
void convert_to_f32(const void* src, DType dtype, size_t n, float* out);
// Reads one tensor of a single file into doubles (any float or integer dtype): tests, tools.
std::vector<double> read_as_f64(const SafeTensorInfo& t);
std::vector<int64_t> read_as_i64(const SafeTensorInfo& t);

// Collects tensors and writes them in one pass. The data pointers must stay valid until
// write() returns. Tensors are written in the order added.
class SafetensorsWriter {
 public:
  void add(const std::string& name, DType dtype, const Shape& shape, const void* data);
  void set_metadata(const std::string& key, const std::string& value) { metadata_[key] = value; }
  size_t total_bytes() const;
  void write(const std::string& path) const;  // atomic: temp file + rename

 private:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    const void* data;
  };
  std::vector<Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace anvil
