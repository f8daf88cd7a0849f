// The host's memory as a process may use it: the machine's (/proc/meminfo: MemTotal and
// MemAvailable, what the kernel can hand out without swapping) within the cgroup's limit
// (a container's or a Slurm job's: cgroup v2 memory.max less memory.current, or v1
// memory.limit_in_bytes less memory.usage_in_bytes). Asynchronous saves hold a snapshot of
// the state in host memory (train/checkpoint_async.h) and are refused up front when it
// does not fit.
#pragma once

#include <cstdint>
#include <string>

namespace anvil {

struct HostMemory {
  int64_t total = 0;      // bytes: the machine's, or the cgroup's limit when lower
  int64_t available = 0;  // bytes this process can still take
  std::string source;     // where the figures come from, for messages ("/proc/meminfo", ...)
};

HostMemory host_memory();
// The same from the files' text (a missing file's text is empty): the testable part.
HostMemory host_memory_from(const std::string& meminfo, const std::string& cgroup_max,
                            const std::string& cgroup_current);

}  // namespace anvil
