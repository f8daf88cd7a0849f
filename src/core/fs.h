// Small file helpers that report errors with the path and the system's reason.
#pragma once

#include <string>
#include <vector>

namespace anvil {

std::string read_file(const std::string& path);
// Writes to path.tmp.<pid>, fsyncs and renames: readers never see half a file.
void write_file_atomic(const std::string& path, const std::string& contents);
bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
void make_directories(const std::string& path);
std::string path_join(const std::string& a, const std::string& b);
std::string errno_text();  // strerror(errno)

}  // namespace anvil
