// safetensors: the mapped reader, dtype conversions and the writer (see safetensors.h).
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <set>

#include "core/bf16.h"
#include "core/error.h"
#include "core/fs.h"

namespace anvil {

namespace {

// One tensor's header entry, checked against the supported dtypes, its shape and the data's size
// (data: the first byte after the header).
SafeTensorInfo parse_entry(const std::string& path, const std::string& name, const Json& v, const uint8_t* data,
                           size_t data_size) {
  SafeTensorInfo t;
  t.name = name;
  ANVIL_ENSURE(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"),
               kInvalidInput, path, ": tensor ", name, ": header entry lacks dtype, shape or data_offsets");
  ANVIL_ENSURE(v["dtype"].is_string(), kInvalidInput, path, ": tensor ", name, ": dtype ", v["dtype"].dump(),
               " is not a dtype name");
  const std::string dt = v["dtype"].get<std::string>();
  ANVIL_ENSURE(dtype_from_name(dt, &t.dtype), kUnsupported, path, ": tensor ", name, ": dtype ", dt,
               " is not supported");
  const auto& shape = v["shape"];
  ANVIL_ENSURE(shape.is_array() && shape.size() <= Shape::kMaxDims, kUnsupported, path, ": tensor ", name,
               ": rank ", shape.size(), " is not supported");
  // The element count as Shape::numel() multiplies it, and the bytes, without overflow: a
  // header's shape must not wrap around to the size of the data it names.
  int64_t numel = 1;
  for (auto& d : shape) {
    const bool ok =
        d.is_number_integer() && d.get<int64_t>() >= 0 && !__builtin_mul_overflow(numel, d.get<int64_t>(), &numel);
    ANVIL_ENSURE(ok, kInvalidInput, path, ": tensor ", name, ": bad shape ", shape.dump());
    t.shape.dims[static_cast<size_t>(t.shape.ndim++)] = d.get<int64_t>();
  }
  const auto& off = v["data_offsets"];
  ANVIL_ENSURE(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
               kInvalidInput, path, ": tensor ", name, ": bad data_offsets ", off.dump());
  const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
  ANVIL_ENSURE(!__builtin_mul_overflow(static_cast<size_t>(numel), dtype_size(t.dtype), &t.bytes) && b <= e &&
                   e - b == t.bytes,
               kInvalidInput, path, ": tensor ", name, ": data_offsets [", b, ", ", e, "] do not match ", dt, " ",
               t.shape.str());
  ANVIL_ENSURE(e <= data_size, kInvalidInput, path, ": tensor ", name, " ends at byte ", e,
               " past the end of the data (", data_size, " bytes): the file is truncated");
  t.data = data + b;
  return t;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ANVIL_ENSURE(fd >= 0, kNotFound, path, ": cannot open (", errno_text(), ")");
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    raise(ErrorKind::kIo, path, ": cannot stat (", errno_text(), ")");
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    raise(ErrorKind::kInvalidInput, path, ": not a safetensors file (", size_, " bytes, truncated?)");
  }
  map_ = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  ANVIL_ENSURE(map_ != MAP_FAILED, kIo, path, ": mmap failed (", errno_text(), ")");
  const uint8_t* base = static_cast<const uint8_t*>(map_);
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);
  ANVIL_ENSURE(header_len <= size_ - 8 && header_len < (100u << 20), kInvalidInput, path,
               ": bad safetensors header length ", header_len, " for a file of ", size_, " bytes (truncated?)");
  const char* text = reinterpret_cast<const char*>(base + 8);
  check_json_depth(std::string_view(text, header_len), path + ": safetensors header");
  Json header;
  try {
    header = Json::parse(reinterpret_cast<const char*>(base + 8), reinterpret_cast<const char*>(base + 8 + header_len));
  } catch (const nlohmann::json::exception& e) {
    raise(ErrorKind::kInvalidInput, path, ": bad safetensors header (", e.what(), ")");
  }
  ANVIL_ENSURE(header.is_object(), kInvalidInput, path, ": safetensors header is not a JSON object");
  const size_t data_start = 8 + header_len;
  const size_t data_size = size_ - data_start;
  for (auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      metadata_ = v;
      continue;
    }
    SafeTensorInfo t = parse_entry(path, name, v, base + data_start, data_size);
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(t));
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ && map_ != MAP_FAILED) ::munmap(map_, size_);
}

const SafeTensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

const SafeTensorInfo& SafetensorsFile::get(const std::string& name) const {
  const SafeTensorInfo* t = find(name);
  ANVIL_ENSURE(t, kNotFound, path_, ": no tensor ", name);
  return *t;
}

SafetensorsSet::SafetensorsSet(const std::string& dir) : dir_(dir) {
  std::vector<std::string> shard_files;
  const std::string index = path_join(dir, "model.safetensors.index.json");
  const std::string single = path_join(dir, "model.safetensors");
  if (path_exists(index)) {
    Json j = json_read_file(index);
    ANVIL_ENSURE(j.contains("weight_map") && j["weight_map"].is_object(), kInvalidInput, index,
                 ": no weight_map");
    std::set<std::string> seen;
    for (auto& [name, file] : j["weight_map"].items()) {
      ANVIL_ENSURE(file.is_string(), kInvalidInput, index, ": weight_map entry ", name, " is ", file.dump(),
                   ", not a file name");
      if (seen.insert(file.get<std::string>()).second) shard_files.push_back(file.get<std::string>());
    }
  } else if (path_exists(single)) {
    shard_files.push_back("model.safetensors");
  } else {
    raise(ErrorKind::kNotFound, dir, ": neither model.safetensors nor model.safetensors.index.json");
  }
  for (auto& f : shard_files) {
    files_.push_back(std::make_unique<SafetensorsFile>(path_join(dir, f)));
    const size_t idx = files_.size() - 1;
    for (auto& t : files_.back()->tensors()) {
      auto [it, inserted] = where_.emplace(t.name, std::make_pair(idx, &t));
      ANVIL_ENSURE(inserted, kInvalidInput, dir, ": tensor ", t.name, " appears in both ",
                   files_[it->second.first]->path(), " and ", files_.back()->path());
    }
  }
}

const SafeTensorInfo* SafetensorsSet::find(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? nullptr : it->second.second;
}

std::string SafetensorsSet::file_of(const std::string& name) const {
  auto it = where_.find(name);
  return it == where_.end() ? dir_ : files_[it->second.first]->path();
}

std::vector<std::string> SafetensorsSet::names() const {
  std::vector<std::string> out;
  for (auto& [n, w] : where_) out.push_back(n);
  return out;
}

void SafetensorsSet::read_f32(const std::string& name, const Shape& shape, float* out) const {
  const SafeTensorInfo* t = find(name);
  ANVIL_ENSURE(t, kNotFound, dir_, ": tensor ", name, " is missing from the model's safetensors");
  ANVIL_ENSURE(t->shape == shape, kInvalidInput, file_of(name), ": tensor ", name, " has shape ", t->shape.str(),
               ", expected ", shape.str(), " from config.json");
  convert_to_f32(t->data, t->dtype, static_cast<size_t>(t->shape.numel()), out);
}

void release_mapped_pages(const void* data, size_t bytes) {
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t b = (reinterpret_cast<uintptr_t>(data) + page - 1) / page * page;
  const uintptr_t e = (reinterpret_cast<uintptr_t>(data) + bytes) / page * page;
  if (e > b) ::madvise(reinterpret_cast<void*>(b), e - b, MADV_DONTNEED);
}

namespace {

// Element i of an array of T at p, which need not be aligned for T: a file's tensor starts
// where its header says, at any byte.
template <class T>
T element(const void* p, size_t i) {
  T v;
  std::memcpy(&v, static_cast<const char*>(p) + i * sizeof(T), sizeof(T));
  return v;
}

}  // namespace

void convert_to_f32(const void* src, DType dtype, size_t n, float* out) {
  switch (dtype) {
    case DType::kF32:
      if (n > 0) std::memcpy(out, src, n * 4);  // an empty tensor's buffer may be null
      return;
    case DType::kBF16:
      for (size_t i = 0; i < n; ++i) out[i] = bf16_bits_to_f32(element<uint16_t>(src, i));
      return;
    case DType::kF16:
      for (size_t i = 0; i < n; ++i) out[i] = f16_bits_to_f32(element<uint16_t>(src, i));
      return;
    case DType::kF64:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<float>(element<double>(src, i));
      return;
    default:
      raise(ErrorKind::kUnsupported, "cannot read a ", dtype_name(dtype), " tensor as floating point");
  }
}

namespace {

// The values of t, stored as From, converted to To.
template <class To, class From>
std::vector<To> converted(const SafeTensorInfo& t) {
  const size_t n = static_cast<size_t>(t.shape.numel());
  std::vector<To> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<To>(element<From>(t.data, i));
  return out;
}

}  // namespace

std::vector<double> read_as_f64(const SafeTensorInfo& t) {
  if (t.dtype == DType::kF64) return converted<double, double>(t);
  if (t.dtype == DType::kI64) return converted<double, int64_t>(t);
  const size_t n = static_cast<size_t>(t.shape.numel());
  std::vector<float> f(n);
  convert_to_f32(t.data, t.dtype, n, f.data());
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) out[i] = f[i];
  return out;
}

std::vector<int64_t> read_as_i64(const SafeTensorInfo& t) {
  if (t.dtype == DType::kI64) return converted<int64_t, int64_t>(t);
  if (t.dtype == DType::kI32) return converted<int64_t, int32_t>(t);
  raise(ErrorKind::kInvalidInput, "tensor ", t.name, " is ", dtype_name(t.dtype), ", expected I64 or I32");
}

void SafetensorsWriter::add(const std::string& name, DType dtype, const Shape& shape, const void* data) {
  for (auto& e : entries_) ANVIL_ENSURE(e.name != name, kInternal, "safetensors: tensor ", name, " added twice");
  entries_.push_back({name, dtype, shape, data});
}

size_t SafetensorsWriter::total_bytes() const {
  size_t n = 0;
  for (auto& e : entries_) n += static_cast<size_t>(e.shape.numel()) * dtype_size(e.dtype);
  return n;
}

void SafetensorsWriter::write(const std::string& path) const {
  Json header = Json::object();
  size_t offset = 0;
  for (auto& e : entries_) {
    const size_t bytes = static_cast<size_t>(e.shape.numel()) * dtype_size(e.dtype);
    Json shape = Json::array();
    for (int i = 0; i < e.shape.ndim; ++i) shape.push_back(e.shape[i]);
    header[e.name] = {{"dtype", dtype_name(e.dtype)}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  Json meta = Json::object();
  for (auto& [k, v] : metadata_) meta[k] = v;
  if (!meta.empty()) header["__metadata__"] = meta;
  std::string text = header.dump();
  while ((8 + text.size()) % 8 != 0) text.push_back(' ');  // data starts 8-byte aligned
  const uint64_t len = text.size();

  AtomicFileWriter file(path);
  file.write(&len, 8);
  file.write(text.data(), text.size());
  for (auto& e : entries_) file.write(e.data, static_cast<size_t>(e.shape.numel()) * dtype_size(e.dtype));
  file.commit();
}

}  // namespace anvil
