// Host memory facts from /proc and the cgroup files (see host_memory.h).
#include "sys/host_memory.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace anvil {
namespace {

std::string slurp(const char* path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A "Key:   123 kB" line of /proc/meminfo, in bytes; -1 when absent.
int64_t meminfo_bytes(const std::string& text, const std::string& key) {
  const size_t at = text.find(key + ":");
  if (at == std::string::npos) return -1;
  return std::strtoll(text.c_str() + at + key.size() + 1, nullptr, 10) * 1024;
}

// A cgroup file's number; -1 for "max", empty or a limit that means none (v1's huge value).
int64_t cgroup_bytes(const std::string& text) {
  if (text.empty() || text[0] < '0' || text[0] > '9') return -1;
  const long long v = std::strtoll(text.c_str(), nullptr, 10);
  return v >= (1LL << 60) ? -1 : v;
}

}  // namespace

HostMemory host_memory_from(const std::string& meminfo, const std::string& cgroup_max,
                            const std::string& cgroup_current) {
  HostMemory m;
  m.total = std::max<int64_t>(0, meminfo_bytes(meminfo, "MemTotal"));
  m.available = std::max<int64_t>(0, meminfo_bytes(meminfo, "MemAvailable"));
  m.source = "/proc/meminfo";
  const int64_t limit = cgroup_bytes(cgroup_max);
  if (limit >= 0 && limit < m.total) {
    m.total = limit;
    const int64_t used = std::max<int64_t>(0, cgroup_bytes(cgroup_current));
    m.available = std::min(m.available, std::max<int64_t>(0, limit - used));
    m.source = "the cgroup's memory limit";
  }
  return m;
}

HostMemory host_memory() {
  const std::string v2 = slurp("/sys/fs/cgroup/memory.max");
  if (!v2.empty()) return host_memory_from(slurp("/proc/meminfo"), v2, slurp("/sys/fs/cgroup/memory.current"));
  return host_memory_from(slurp("/proc/meminfo"), slurp("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
                          slurp("/sys/fs/cgroup/memory/memory.usage_in_bytes"));
}

}  // namespace anvil
