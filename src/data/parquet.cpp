// The Parquet reader (see parquet.h): the mapped file and its schema lookups. The footer is
// parsed in parquet_footer.cpp, the pages of a column in parquet_pages.cpp (through
// parquet_thrift.h and parquet_encodings.h).
#include "data/parquet.h"

#include <sys/mman.h>
#include <unistd.h>

#include "core/error.h"
#include "core/fs.h"

namespace anvil::parquet {

const char* type_name(int32_t t) {
  static const char* names[] = {"BOOLEAN", "INT32", "INT64", "INT96", "FLOAT", "DOUBLE", "BYTE_ARRAY",
                                "FIXED_LEN_BYTE_ARRAY"};
  return t >= 0 && t < 8 ? names[t] : "GROUP";
}

File::File(const std::string& path) : path_(path) {
  const int fd = open_read_only(path, &size_);
  if (size_ > 0) {
    void* map = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    ::close(fd);
    ANVIL_ENSURE(map != MAP_FAILED, kIo, path, ": mmap failed (", errno_text(), ")");
    data_ = static_cast<const uint8_t*>(map);
  } else {
    ::close(fd);
  }
  try {
    parse_footer();
  } catch (...) {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    throw;
  }
}

File::~File() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

int File::top_level(std::string_view name) const {
  for (int c : schema_[0].children)
    if (schema_[static_cast<size_t>(c)].name == name) return c;
  return -1;
}

}  // namespace anvil::parquet
