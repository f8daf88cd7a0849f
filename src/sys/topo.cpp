// GPU topology from NVML answers (see topo.h).
#include "sys/topo.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/error.h"
#include "core/units.h"

namespace anvil {

namespace {

const char* remote_name(NvLinkRemote r) {
  return r == NvLinkRemote::kGpu ? "gpu" : r == NvLinkRemote::kSwitch ? "switch" : "other";
}

// "0000:18:00.0", "00000000:18:00.0" and lower case all name the same device.
std::string normalize_bus_id(const std::string& id) {
  unsigned domain = 0, bus = 0, dev = 0, fn = 0;
  if (std::sscanf(id.c_str(), "%x:%x:%x.%x", &domain, &bus, &dev, &fn) != 4) return id;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%08X:%02X:%02X.%X", domain, bus, dev, fn);
  return buf;
}

std::string level_name(int level) {
  switch (level) {
    case 0:   // on the same board
    case 10: return "PIX";
    case 20: return "PXB";
    case 30: return "PHB";
    case 40: return "NODE";
    case 50: return "SYS";
  }
  return "?";
}

std::string p2p_name(int status) {
  switch (status) {
    case 0: return "OK";
    case 1: return "CNS";
    case 2: return "GNS";
    case 3: return "TNS";
    case 4:  // disabled by a registry key
    case 5: return "NS";
  }
  return "U";
}

// Smaller is faster: NVLink (more links first), then the PCIe paths.
int link_rank(const std::string& link, int nvlinks) {
  if (nvlinks > 0) return 100 - nvlinks;
  static const char* order[] = {"PIX", "PXB", "PHB", "NODE", "SYS"};
  for (int k = 0; k < 5; ++k)
    if (link == order[k]) return 200 + k;
  return 300;
}

struct Generation {
  const char* name;
  double gbps;  // per link, per direction
};
Generation nvlink_generation(unsigned code) {
  switch (code) {
    case 1: return {"1.0", 20};
    case 2: return {"2.0", 25};
    case 3: return {"2.2", 25};
    case 4: return {"3.0", 25};
    case 5: return {"3.1", 25};
    case 6: return {"4.0", 25};
    case 7: return {"5.0", 50};
  }
  return {"unknown", 0};
}

std::string fixed0(double v) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(0);
  s << v;
  return s.str();
}

std::vector<std::vector<int>> square(const Json& j, size_t n, const std::string& key, const std::string& what) {
  ANVIL_ENSURE(j.contains(key) && j[key].is_array() && j[key].size() == n, kInvalidInput, what, ": '", key,
               "' must be a ", n, " x ", n, " array");
  std::vector<std::vector<int>> m;
  for (const Json& row : j[key]) {
    ANVIL_ENSURE(row.is_array() && row.size() == n, kInvalidInput, what, ": a row of '", key, "' does not have ", n,
                 " entries");
    m.push_back(row.get<std::vector<int>>());
  }
  return m;
}

}  // namespace

TopoAnswers topo_answers_from_json(const Json& j, const std::string& what) {
  TopoAnswers a;
  try {
    a.source = j.value("source", "");
    a.driver_version = j.value("driver_version", "");
    for (const Json& g : j.at("gpus")) {
      TopoGpu gpu;
      gpu.name = g.at("name").get<std::string>();
      gpu.memory_bytes = g.at("memory_bytes").get<uint64_t>();
      gpu.bus_id = g.at("bus_id").get<std::string>();
      gpu.numa_node = g.value("numa_node", -1);
      gpu.cpu_affinity = g.value("cpu_affinity", "");
      for (const Json& l : g.value("nvlinks", Json::array())) {
        TopoLink link;
        link.link = l.at("link").get<int>();
        link.version = l.at("version").get<unsigned>();
        link.remote_bus_id = l.value("remote_bus_id", "");
        const std::string remote = l.value("remote", "gpu");
        link.remote = remote == "gpu" ? NvLinkRemote::kGpu : remote == "switch" ? NvLinkRemote::kSwitch : NvLinkRemote::kOther;
        gpu.links.push_back(link);
      }
      a.gpus.push_back(gpu);
    }
  } catch (const Json::exception& e) {
    raise(ErrorKind::kInvalidInput, what, ": malformed topology answers: ", e.what());
  }
  a.common_ancestor = square(j, a.gpus.size(), "common_ancestor", what);
  a.p2p_status = square(j, a.gpus.size(), "p2p_status", what);
  return a;
}

Json topo_answers_to_json(const TopoAnswers& a) {
  Json gpus = Json::array();
  for (const TopoGpu& g : a.gpus) {
    Json links = Json::array();
    for (const TopoLink& l : g.links)
      links.push_back({{"link", l.link}, {"version", l.version}, {"remote_bus_id", l.remote_bus_id},
                       {"remote", remote_name(l.remote)}});
    gpus.push_back({{"name", g.name}, {"memory_bytes", g.memory_bytes}, {"bus_id", g.bus_id}, {"numa_node", g.numa_node},
                    {"cpu_affinity", g.cpu_affinity}, {"nvlinks", links}});
  }
  return {{"source", a.source}, {"driver_version", a.driver_version}, {"gpus", gpus},
          {"common_ancestor", a.common_ancestor}, {"p2p_status", a.p2p_status}};
}

namespace {

// Each GPU's links to an NVSwitch, and the newest NVLink version seen.
struct SwitchLinks {
  std::vector<int> per_gpu;
  unsigned version = 0;
};

// Counts the NVLinks joining each pair of GPUs directly, and the most links of any GPU.
SwitchLinks count_direct_nvlinks(Topology& t) {
  const TopoAnswers& a = t.answers;
  const size_t un = a.gpus.size();
  SwitchLinks sw;
  sw.per_gpu.assign(un, 0);
  for (size_t i = 0; i < un; ++i) {
    const TopoGpu& g = a.gpus[i];
    t.nvlinks_per_gpu = std::max(t.nvlinks_per_gpu, static_cast<int>(g.links.size()));
    for (const TopoLink& l : g.links) {
      sw.version = std::max(sw.version, l.version);
      if (l.remote == NvLinkRemote::kSwitch) {
        ++sw.per_gpu[i];
        continue;
      }
      const std::string remote = normalize_bus_id(l.remote_bus_id);
      for (size_t j = 0; j < un; ++j)
        if (j != i && normalize_bus_id(a.gpus[j].bus_id) == remote) ++t.nvlinks[i][j];
    }
  }
  return sw;
}

// Each pair's link (its NVLinks, through an NVSwitch too, else its PCIe level) and P2P status, and the NVLink
// generation.
void fill_pair_links(Topology& t, const SwitchLinks& sw) {
  const size_t un = static_cast<size_t>(t.gpus);
  for (size_t i = 0; i < un; ++i)
    for (size_t j = 0; j < un; ++j) {
      if (i == j) continue;
      if (sw.per_gpu[i] > 0 && sw.per_gpu[j] > 0) {
        t.nvswitch = true;
        t.nvlinks[i][j] += std::min(sw.per_gpu[i], sw.per_gpu[j]);
      }
      t.link[i][j] = t.nvlinks[i][j] > 0 ? cat("NV", t.nvlinks[i][j]) : level_name(t.answers.common_ancestor[i][j]);
      t.p2p[i][j] = p2p_name(t.answers.p2p_status[i][j]);
    }
  if (sw.version > 0) {
    const Generation gen = nvlink_generation(sw.version);
    t.nvlink_generation = gen.name;
    t.nvlink_gbps_per_link = gen.gbps;
  }
}

// What the pairs of GPUs add up to: how many NVLink joins, the first pair across sockets, the first without P2P.
struct PairSummary {
  int nv_pairs = 0, pairs = 0;
  std::string sys_pair, no_p2p;
};

// Sums up the pairs, and sets the slowest link of any pair.
PairSummary summarize_pairs(Topology& t) {
  const size_t un = static_cast<size_t>(t.gpus);
  PairSummary p;
  int worst = -1;
  for (size_t i = 0; i < un; ++i)
    for (size_t j = i + 1; j < un; ++j) {
      ++p.pairs;
      p.nv_pairs += t.nvlinks[i][j] > 0;
      const int r = link_rank(t.link[i][j], t.nvlinks[i][j]);
      if (r > worst) {
        worst = r;
        t.worst_link = t.link[i][j];
      }
      if (t.link[i][j] == "SYS" && p.sys_pair.empty()) p.sys_pair = cat("GPU", i, " and GPU", j);
      if (t.p2p[i][j] != "OK" && p.no_p2p.empty()) p.no_p2p = cat("GPU", i, " and GPU", j, " (", t.p2p[i][j], ")");
    }
  return p;
}

// The reading of the links between GPUs: which parallel mode suits them.
std::string read_links(const Topology& t, const PairSummary& p) {
  const std::string pcie_advice =
      "prefer DDP with gradient accumulation: it all-reduces the gradients once per optimizer step (no_sync on the "
      "other micro-batches), while FSDP gathers every unit's weights again in each micro-batch's forward and backward. "
      "Use FSDP only for models whose weights, gradients and AdamW state (16 bytes per parameter under DDP) do not "
      "fit one GPU.";
  if (t.gpus == 0) return "No GPU: nothing to link. Train with --device cpu.";
  if (t.gpus == 1)
    return "One GPU: there is nobody to communicate with. DDP and FSDP both run at world size 1 (FSDP shards "
           "nothing); anvil bench measures device copy bandwidth. Data parallelism needs a machine with more GPUs.";
  if (p.nv_pairs == p.pairs)
    return cat("NVLink joins every pair (", t.worst_link, ", NVLink ", t.nvlink_generation,
               t.nvswitch ? " through NVSwitch" : "", ": about ", fixed0(t.nvlinks_per_gpu * t.nvlink_gbps_per_link),
               " GB/s per direction per GPU). FSDP's extra traffic is cheap here: per step it moves about as many "
               "bytes as DDP (bf16 weights gathered for forward and backward, fp32 gradients reduce-scattered, "
               "against DDP's fp32 all-reduce), overlapped with compute, and NVLink absorbs the re-gathering of "
               "each micro-batch. Choose FSDP whenever DDP's full copy of weights, gradients and AdamW state does "
               "not fit; expect both modes near the same speed.");
  if (p.nv_pairs == 0)
    return cat("PCIe only (slowest path between two GPUs: ", t.worst_link, "): every collective crosses PCIe; ",
               pcie_advice);
  return cat("NVLink joins only some pairs (", p.nv_pairs, " of ", p.pairs, "; slowest path: ", t.worst_link,
             "): ring collectives run at the speed of their slowest hop, so this machine is PCIe-bound for "
             "collectives over all GPUs; ", pcie_advice,
             " A job on only the NVLink-joined GPUs (CUDA_VISIBLE_DEVICES) behaves like an NVLink machine.");
}

// The reading of where the GPUs sit: across sockets or NUMA nodes, and without P2P.
void read_placement(Topology& t, const PairSummary& p) {
  auto& r = t.reading;
  std::vector<int> nodes;
  for (const TopoGpu& g : t.answers.gpus)
    if (g.numa_node >= 0 && std::find(nodes.begin(), nodes.end(), g.numa_node) == nodes.end()) nodes.push_back(g.numa_node);
  const std::string numa_advice = "Each worker's CPU threads belong on its GPU's NUMA node (the NUMA Affinity column; "
                                  "numactl --cpunodebind), or its host-side work crosses sockets too.";
  if (!p.sys_pair.empty())
    r.push_back(cat("The GPUs sit under different CPU sockets (", p.sys_pair, ": SYS): traffic between them crosses "
                    "the inter-socket link, the slowest path of the machine. ", numa_advice));
  else if (nodes.size() > 1)
    r.push_back(cat("The GPUs hang off ", nodes.size(), " NUMA nodes, though GPU traffic does not cross sockets. ",
                    numa_advice));
  if (!p.no_p2p.empty())
    r.push_back(cat("Peer-to-peer access is unavailable between ", p.no_p2p, ": NCCL stages that traffic through host "
                    "memory. If that is unexpected, check the host's IOMMU and PCIe ACS settings."));
}

}  // namespace

Topology build_topology(const TopoAnswers& a) {
  Topology t;
  t.answers = a;
  t.gpus = static_cast<int>(a.gpus.size());
  const size_t un = a.gpus.size();
  t.nvlinks.assign(un, std::vector<int>(un, 0));
  t.link.assign(un, std::vector<std::string>(un, "X"));
  t.p2p.assign(un, std::vector<std::string>(un, "X"));
  fill_pair_links(t, count_direct_nvlinks(t));
  const PairSummary pairs = summarize_pairs(t);
  t.reading.push_back(read_links(t, pairs));
  read_placement(t, pairs);
  return t;
}

namespace {

std::string cell(const std::string& s, size_t width) { return s.size() >= width ? s + " " : s + std::string(width - s.size(), ' '); }

// The heading, and one row per GPU: its name, memory, bus id, NUMA node and CPUs.
void write_gpu_table(std::ostringstream& s, const Topology& t) {
  const auto& a = t.answers;
  const size_t n = static_cast<size_t>(t.gpus);
  s << "anvil topo: " << n << " GPU" << (n == 1 ? "" : "s");
  if (!a.driver_version.empty()) s << ", driver " << a.driver_version;
  if (!a.source.empty() && a.source != "nvml") s << " (answers: " << a.source << ")";
  s << "\n\n" << cell("GPU", 5) << cell("name", 28) << cell("memory", 11) << cell("PCI bus id", 18) << cell("NUMA", 6)
    << "CPU affinity\n";
  for (size_t i = 0; i < n; ++i) {
    const TopoGpu& g = a.gpus[i];
    s << cell(std::to_string(i), 5) << cell(g.name, 28) << cell(gib(static_cast<double>(g.memory_bytes), 1) + " GiB", 11) << cell(g.bus_id, 18)
      << cell(g.numa_node >= 0 ? std::to_string(g.numa_node) : "N/A", 6) << (g.cpu_affinity.empty() ? "N/A" : g.cpu_affinity)
      << "\n";
  }
}

// The link matrix as nvidia-smi topo -m prints it, with its legend.
void write_link_matrix(std::ostringstream& s, const Topology& t) {
  const size_t n = static_cast<size_t>(t.gpus);
  s << "\nLinks (as nvidia-smi topo -m):\n" << cell("", 8);
  for (size_t j = 0; j < n; ++j) s << cell(cat("GPU", j), 8);
  s << cell("CPU Affinity", 16) << "NUMA Affinity\n";
  for (size_t i = 0; i < n; ++i) {
    s << cell(cat("GPU", i), 8);
    for (size_t j = 0; j < n; ++j) s << cell(i == j ? " X" : t.link[i][j], 8);
    const TopoGpu& g = t.answers.gpus[i];
    s << cell(g.cpu_affinity.empty() ? "N/A" : g.cpu_affinity, 16) << (g.numa_node >= 0 ? std::to_string(g.numa_node) : "N/A")
      << "\n";
  }
  s << "\n  X    = Self\n"
       "  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)\n"
       "  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node\n"
       "  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)\n"
       "  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)\n"
       "  PIX  = Connection traversing at most a single PCIe bridge\n"
       "  NV#  = Connection traversing a bonded set of # NVLinks\n";
}

// The peer-to-peer matrix as nvidia-smi topo -p2p p prints it, with its legend, and the NVLink line.
void write_p2p_and_nvlink(std::ostringstream& s, const Topology& t) {
  const size_t n = static_cast<size_t>(t.gpus);
  s << "\nPeer-to-peer (as nvidia-smi topo -p2p p):\n" << cell("", 8);
  for (size_t j = 0; j < n; ++j) s << cell(cat("GPU", j), 8);
  s << "\n";
  for (size_t i = 0; i < n; ++i) {
    s << cell(cat("GPU", i), 8);
    for (size_t j = 0; j < n; ++j) s << cell(i == j ? " X" : t.p2p[i][j], 8);
    s << "\n";
  }
  s << "\n  X = Self, OK = Status Ok, CNS = Chipset not supported, GNS = GPU not supported,\n"
       "  TNS = Topology not supported, NS = Not supported, U = Unknown\n";
  s << "\nNVLink: ";
  if (t.nvlink_generation.empty()) {
    s << "none active\n";
  } else {
    s << t.nvlink_generation << ", up to " << t.nvlinks_per_gpu << " active links per GPU"
      << (t.nvswitch ? " through NVSwitch" : "") << ", " << fixed0(t.nvlink_gbps_per_link)
      << " GB/s per link per direction: " << fixed0(t.nvlinks_per_gpu * t.nvlink_gbps_per_link)
      << " GB/s per direction per GPU\n";
  }
}

// Padded cells leave trailing blanks at the ends of rows: drop them.
std::string drop_trailing_blanks(const std::string& text) {
  std::string out;
  size_t start = 0;
  while (start < text.size()) {
    size_t nl = text.find('\n', start);
    std::string line = text.substr(start, nl - start);
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
    start = nl + 1;
  }
  return out;
}

}  // namespace

std::string topo_text(const Topology& t) {
  std::ostringstream s;
  write_gpu_table(s, t);
  write_link_matrix(s, t);
  write_p2p_and_nvlink(s, t);
  s << "\nReading:\n";
  for (const std::string& line : t.reading) s << "  - " << line << "\n";
  return drop_trailing_blanks(s.str());
}

Json topo_json(const Topology& t) {
  Json j = topo_answers_to_json(t.answers);
  j["link_matrix"] = t.link;
  j["nvlink_matrix"] = t.nvlinks;
  j["p2p_matrix"] = t.p2p;
  j["nvswitch"] = t.nvswitch;
  j["nvlink_generation"] = t.nvlink_generation.empty() ? Json(nullptr) : Json(t.nvlink_generation);
  j["nvlink_gbps_per_link_per_direction"] = t.nvlink_gbps_per_link;
  j["nvlinks_per_gpu"] = t.nvlinks_per_gpu;
  j["slowest_link"] = t.worst_link;
  j["reading"] = t.reading;
  return j;
}

}  // namespace anvil
