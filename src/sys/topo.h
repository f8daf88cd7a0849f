// GPU topology: how the GPUs of this machine are linked, and what that means for DDP and
// FSDP (anvil topo).
//
// Built in two steps so that everything but the driver calls is tested without a GPU:
// TopoAnswers holds the raw answers NVML gives (sys/nvml.h asks them on a live machine;
// tests and --answers read them from JSON, and --record writes them), and
// build_topology() turns them into the matrices `nvidia-smi topo -m` and
// `nvidia-smi topo -p2p p` show, the NVLink generation and bandwidth, and a short reading.
// NVML codes are kept as NVML defines them (topology levels 0/10/20/30/40/50, P2P status
// 0..6, NVLink version codes of nvmlNvlinkVersion_t) so recorded answers stay faithful.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"

namespace anvil {

enum class NvLinkRemote { kGpu, kSwitch, kOther };

struct TopoLink {  // one active NVLink of a GPU
  int link = 0;
  unsigned version = 0;       // nvmlNvlinkVersion_t: 1 = 1.0, 2 = 2.0, 3 = 2.2, 4 = 3.0, 5 = 3.1, 6 = 4.0, 7 = 5.0
  std::string remote_bus_id;  // the PCI bus id at the other end
  NvLinkRemote remote = NvLinkRemote::kGpu;
};

struct TopoGpu {
  std::string name;
  uint64_t memory_bytes = 0;
  std::string bus_id;        // "00000000:18:00.0"
  int numa_node = -1;        // of the CPU side (-1: unknown)
  std::string cpu_affinity;  // "0-55,112-167"
  std::vector<TopoLink> links;
};

struct TopoAnswers {
  std::string source;  // where the answers came from ("nvml", or a description of fake data)
  std::string driver_version;
  std::vector<TopoGpu> gpus;
  std::vector<std::vector<int>> common_ancestor;  // NVML topology level between GPU i and j
  std::vector<std::vector<int>> p2p_status;       // NVML P2P status, NVML_P2P_CAPS_INDEX_PROP
};

TopoAnswers topo_answers_from_json(const Json& j, const std::string& what);
Json topo_answers_to_json(const TopoAnswers& a);

struct Topology {
  TopoAnswers answers;
  int gpus = 0;
  std::vector<std::vector<int>> nvlinks;       // bonded NVLinks between i and j (via NVSwitch: the smaller count)
  std::vector<std::vector<std::string>> link;  // "X", "NV18", "PIX", "PXB", "PHB", "NODE", "SYS"
  std::vector<std::vector<std::string>> p2p;   // "X", "OK", "CNS", "GNS", "TNS", "NS", "U"
  bool nvswitch = false;
  std::string nvlink_generation;   // "4.0"; empty without NVLink
  double nvlink_gbps_per_link = 0; // per direction
  int nvlinks_per_gpu = 0;         // the most active links of any GPU
  std::string worst_link;          // the slowest path between two GPUs ("SYS", "NV12", ...)
  std::vector<std::string> reading;
};

Topology build_topology(const TopoAnswers& answers);
std::string topo_text(const Topology& t);
Json topo_json(const Topology& t);

}  // namespace anvil
