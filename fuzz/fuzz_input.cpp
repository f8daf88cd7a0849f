// The fuzz targets' shared helpers (see fuzz_input.h).
#include "fuzz_input.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace anvil::fuzz {

const std::string& scratch_dir() {
  // Never destroyed: the exit handler that removes the folder runs after static destructors.
  static const std::string* dir = [] {
    const std::string base = std::filesystem::is_directory("/dev/shm") ? "/dev/shm"
                                                                       : std::filesystem::temp_directory_path().string();
    auto* d = new std::string(base + "/anvil-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(*d);
    // Removed at exit; a crash leaves it behind, named by the pid.
    std::atexit([] { std::filesystem::remove_all(scratch_dir()); });
    return d;
  }();
  return *dir;
}

std::string write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::string path = scratch_dir() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) escaped("a scratch write failure", path.c_str());
  return path;
}

std::string write_input(const std::string& name, const std::string& text) {
  return write_input(name, reinterpret_cast<const uint8_t*>(text.data()), text.size());
}

void escaped(const char* type, const char* what) {
  std::fprintf(stderr, "\nanvil fuzz: %s escaped the reader: %s\n", type, what);
  std::abort();
}

std::string fixture_path(const std::string& name) {
  const char* env = std::getenv("ANVIL_FUZZ_FIXTURES");
  return std::string(env && *env ? env : ANVIL_FUZZ_FIXTURES) + "/" + name;
}

}  // namespace anvil::fuzz
