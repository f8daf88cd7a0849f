// The NVML queries behind anvil topo (see nvml.h). Functions are looked up by their
// versioned names (nvmlInit_v2, ...GetPciInfo_v3), which is what nvml.h maps the plain
// names to; enums travel as int, as the C ABI passes them.
#include "sys/nvml.h"

#include <dlfcn.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "core/error.h"

namespace anvil {

namespace {

using nvmlReturn_t = int;
using nvmlDevice_t = struct nvmlDevice_st*;
constexpr nvmlReturn_t kSuccess = 0;
constexpr unsigned kMaxLinks = 18;          // NVML_NVLINK_MAX_LINKS
constexpr int kP2pCapsIndexProp = 4;        // NVML_P2P_CAPS_INDEX_PROP (= _PCI)
constexpr int kNvLinkRemoteSwitch = 2;      // NVML_NVLINK_DEVICE_TYPE_SWITCH
constexpr int kNvLinkRemoteGpu = 0;         // NVML_NVLINK_DEVICE_TYPE_GPU

struct nvmlMemory_t {
  unsigned long long total, free, used;
};
struct nvmlPciInfo_t {  // the _v3 layout
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

class Nvml {
 public:
  Nvml() {
    for (const char* file : {"libnvidia-ml.so.1", "libnvidia-ml.so"}) {
      lib_ = ::dlopen(file, RTLD_NOW | RTLD_LOCAL);
      if (lib_) break;
    }
    if (!lib_) {
      const char* why = ::dlerror();
      raise(ErrorKind::kNoDevice, "no NVIDIA driver: libnvidia-ml.so.1 could not be loaded (", why ? why : "not found",
            "); anvil topo needs a machine with an NVIDIA GPU and its driver");
    }
    init = sym<nvmlReturn_t()>("nvmlInit_v2");
    shutdown = sym<nvmlReturn_t()>("nvmlShutdown");
    error_string = sym<const char*(nvmlReturn_t)>("nvmlErrorString");
    driver_version = sym<nvmlReturn_t(char*, unsigned)>("nvmlSystemGetDriverVersion");
    count = sym<nvmlReturn_t(unsigned*)>("nvmlDeviceGetCount_v2");
    handle = sym<nvmlReturn_t(unsigned, nvmlDevice_t*)>("nvmlDeviceGetHandleByIndex_v2");
    name = sym<nvmlReturn_t(nvmlDevice_t, char*, unsigned)>("nvmlDeviceGetName");
    memory = sym<nvmlReturn_t(nvmlDevice_t, nvmlMemory_t*)>("nvmlDeviceGetMemoryInfo");
    pci = sym<nvmlReturn_t(nvmlDevice_t, nvmlPciInfo_t*)>("nvmlDeviceGetPciInfo_v3");
    cpu_affinity = sym<nvmlReturn_t(nvmlDevice_t, unsigned, unsigned long*)>("nvmlDeviceGetCpuAffinity");
    common_ancestor = sym<nvmlReturn_t(nvmlDevice_t, nvmlDevice_t, int*)>("nvmlDeviceGetTopologyCommonAncestor");
    p2p_status = sym<nvmlReturn_t(nvmlDevice_t, nvmlDevice_t, int, int*)>("nvmlDeviceGetP2PStatus");
    link_state = sym<nvmlReturn_t(nvmlDevice_t, unsigned, int*)>("nvmlDeviceGetNvLinkState");
    link_version = sym<nvmlReturn_t(nvmlDevice_t, unsigned, unsigned*)>("nvmlDeviceGetNvLinkVersion");
    link_remote_pci = sym<nvmlReturn_t(nvmlDevice_t, unsigned, nvmlPciInfo_t*)>("nvmlDeviceGetNvLinkRemotePciInfo_v2");
    // Older drivers lack it; then a remote that is none of the GPUs is taken for a switch.
    link_remote_type = optional_sym<nvmlReturn_t(nvmlDevice_t, unsigned, int*)>("nvmlDeviceGetNvLinkRemoteDeviceType");
    const nvmlReturn_t r = init();
    ANVIL_ENSURE(r == kSuccess, kNoDevice, "the NVIDIA driver did not start NVML: ", error_string(r),
                 " (nvidia-smi shows the same problem)");
  }
  ~Nvml() {
    if (shutdown) shutdown();
    ::dlclose(lib_);
  }
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  void check(nvmlReturn_t r, const char* what) const {
    ANVIL_ENSURE(r == kSuccess, kDevice, "NVML ", what, " failed: ", error_string(r));
  }

  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;
  nvmlReturn_t (*count)(unsigned*) = nullptr;
  nvmlReturn_t (*handle)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*pci)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*cpu_affinity)(nvmlDevice_t, unsigned, unsigned long*) = nullptr;
  nvmlReturn_t (*common_ancestor)(nvmlDevice_t, nvmlDevice_t, int*) = nullptr;
  nvmlReturn_t (*p2p_status)(nvmlDevice_t, nvmlDevice_t, int, int*) = nullptr;
  nvmlReturn_t (*link_state)(nvmlDevice_t, unsigned, int*) = nullptr;
  nvmlReturn_t (*link_version)(nvmlDevice_t, unsigned, unsigned*) = nullptr;
  nvmlReturn_t (*link_remote_pci)(nvmlDevice_t, unsigned, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*link_remote_type)(nvmlDevice_t, unsigned, int*) = nullptr;

 private:
  template <class F>
  F* optional_sym(const char* symbol) {
    return reinterpret_cast<F*>(::dlsym(lib_, symbol));
  }
  template <class F>
  F* sym(const char* symbol) {
    F* f = optional_sym<F>(symbol);
    ANVIL_ENSURE(f != nullptr, kNoDevice, "the NVIDIA driver's NVML lacks ", symbol, " (driver too old?)");
    return f;
  }
  void* lib_ = nullptr;
};

// "0-55,112-167" from a CPU bit mask.
std::string cpu_ranges(const std::vector<unsigned long>& mask) {
  std::string out;
  const int bits = static_cast<int>(mask.size() * sizeof(unsigned long) * 8);
  auto set = [&](int c) { return (mask[static_cast<size_t>(c) / (sizeof(unsigned long) * 8)] >> (c % (sizeof(unsigned long) * 8))) & 1ul; };
  for (int c = 0; c < bits;) {
    if (!set(c)) {
      ++c;
      continue;
    }
    int e = c;
    while (e + 1 < bits && set(e + 1)) ++e;
    out += cat(out.empty() ? "" : ",", c, e > c ? cat("-", e) : "");
    c = e + 1;
  }
  return out;
}

// The NUMA node of a PCI device, from sysfs (NVML's "00000000:18:00.0" is "0000:18:00.0" there).
int numa_node_of(const std::string& bus_id) {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return -1;
  char path[128];
  std::snprintf(path, sizeof path, "/sys/bus/pci/devices/%04x:%02x:%02x.%x/numa_node", domain, bus, dev, fn);
  std::ifstream f(path);
  int node = -1;
  if (!(f >> node)) return -1;
  return node;
}

}  // namespace

TopoAnswers nvml_topo_answers() {
  Nvml nvml;
  TopoAnswers a;
  a.source = "nvml";
  char buf[96] = {};
  if (nvml.driver_version(buf, sizeof buf) == kSuccess) a.driver_version = buf;
  unsigned n = 0;
  nvml.check(nvml.count(&n), "device count");
  ANVIL_ENSURE(n > 0, kNoDevice, "the NVIDIA driver is loaded but sees no GPU");
  std::vector<nvmlDevice_t> devs(n);
  for (unsigned i = 0; i < n; ++i) {
    nvml.check(nvml.handle(i, &devs[i]), "device handle");
    TopoGpu g;
    char name[96] = {};
    nvml.check(nvml.name(devs[i], name, sizeof name), "device name");
    g.name = name;
    nvmlMemory_t mem{};
    nvml.check(nvml.memory(devs[i], &mem), "memory info");
    g.memory_bytes = mem.total;
    nvmlPciInfo_t pci{};
    nvml.check(nvml.pci(devs[i], &pci), "PCI info");
    g.bus_id = pci.busId;
    g.numa_node = numa_node_of(g.bus_id);
    std::vector<unsigned long> mask(64, 0);
    if (nvml.cpu_affinity(devs[i], static_cast<unsigned>(mask.size()), mask.data()) == kSuccess) g.cpu_affinity = cpu_ranges(mask);
    for (unsigned l = 0; l < kMaxLinks; ++l) {
      int active = 0;
      if (nvml.link_state(devs[i], l, &active) != kSuccess || !active) continue;
      TopoLink link;
      link.link = static_cast<int>(l);
      nvml.link_version(devs[i], l, &link.version);
      nvmlPciInfo_t remote{};
      if (nvml.link_remote_pci(devs[i], l, &remote) == kSuccess) link.remote_bus_id = remote.busId;
      int type = kNvLinkRemoteGpu;
      if (nvml.link_remote_type && nvml.link_remote_type(devs[i], l, &type) == kSuccess)
        link.remote = type == kNvLinkRemoteGpu ? NvLinkRemote::kGpu : type == kNvLinkRemoteSwitch ? NvLinkRemote::kSwitch : NvLinkRemote::kOther;
      g.links.push_back(link);
    }
    a.gpus.push_back(g);
  }
  if (!nvml.link_remote_type)
    for (TopoGpu& g : a.gpus)
      for (TopoLink& l : g.links) {
        bool to_gpu = false;
        for (const TopoGpu& other : a.gpus) to_gpu |= std::strcmp(other.bus_id.c_str(), l.remote_bus_id.c_str()) == 0;
        l.remote = to_gpu ? NvLinkRemote::kGpu : NvLinkRemote::kSwitch;
      }
  a.common_ancestor.assign(n, std::vector<int>(n, 0));
  a.p2p_status.assign(n, std::vector<int>(n, 0));
  for (unsigned i = 0; i < n; ++i)
    for (unsigned j = 0; j < n; ++j) {
      if (i == j) continue;
      int level = 0, status = 6;
      nvml.check(nvml.common_ancestor(devs[i], devs[j], &level), "topology common ancestor");
      if (nvml.p2p_status(devs[i], devs[j], kP2pCapsIndexProp, &status) != kSuccess) status = 6;
      a.common_ancestor[i][j] = level;
      a.p2p_status[i][j] = status;
    }
  return a;
}

}  // namespace anvil
