// anvil topo from recorded (fake) NVML answers: PCIe only, NVSwitch, two sockets with
// NVLink bridges, one GPU. The matrices are checked cell by cell against what
// nvidia-smi topo -m / -p2p p print for such machines, and the reading against each case.
#include <dlfcn.h>

#include "core/error.h"
#include "core/fs.h"
#include "core/json.h"
#include "sys/topo.h"
#include "testing.h"

namespace anvil {
namespace {

std::string answers_path(const std::string& name) { return testing::testdata_dir() + "/topo/" + name + ".json"; }

Topology load(const std::string& name) {
  return build_topology(topo_answers_from_json(json_read_file(answers_path(name)), name));
}

using Matrix = std::vector<std::vector<std::string>>;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(Topo, PcieOnly) {
  Topology t = load("pcie_4gpu");
  EXPECT_EQ(t.link, (Matrix{{"X", "PXB", "NODE", "NODE"},
                            {"PXB", "X", "NODE", "NODE"},
                            {"NODE", "NODE", "X", "PXB"},
                            {"NODE", "NODE", "PXB", "X"}}));
  EXPECT_EQ(t.p2p, (Matrix{{"X", "OK", "TNS", "TNS"},
                           {"OK", "X", "TNS", "TNS"},
                           {"TNS", "TNS", "X", "OK"},
                           {"TNS", "TNS", "OK", "X"}}));
  EXPECT_EQ(t.nvlink_generation, "");
  EXPECT_EQ(t.worst_link, "NODE");
  ASSERT_EQ(t.reading.size(), 2u);
  EXPECT_TRUE(has(t.reading[0], "PCIe only (slowest path between two GPUs: NODE)")) << t.reading[0];
  EXPECT_TRUE(has(t.reading[0], "prefer DDP with gradient accumulation")) << t.reading[0];
  EXPECT_TRUE(has(t.reading[0], "Use FSDP only for models")) << t.reading[0];
  EXPECT_TRUE(has(t.reading[1], "Peer-to-peer access is unavailable between GPU0 and GPU2 (TNS)")) << t.reading[1];
  const std::string text = topo_text(t);
  EXPECT_TRUE(has(text, "\nGPU0     X      PXB     NODE    NODE    0-31            0\n")) << text;
  EXPECT_TRUE(has(text, "\nGPU3    TNS     TNS     OK       X\n")) << text;
  EXPECT_TRUE(has(text, "\nNVLink: none active\n")) << text;
  EXPECT_TRUE(has(text, "0    NVIDIA L40S                 45.0 GiB   00000000:17:00.0  0     0-31\n")) << text;
}

TEST(Topo, NvlinkThroughNvswitch) {
  Topology t = load("nvlink_8gpu_nvswitch");
  ASSERT_EQ(t.gpus, 8);
  for (int i = 0; i < 8; ++i)
    for (int j = 0; j < 8; ++j) {
      EXPECT_EQ(t.link[static_cast<size_t>(i)][static_cast<size_t>(j)], i == j ? "X" : "NV18") << i << "," << j;
      EXPECT_EQ(t.p2p[static_cast<size_t>(i)][static_cast<size_t>(j)], i == j ? "X" : "OK");
    }
  EXPECT_TRUE(t.nvswitch);
  EXPECT_EQ(t.nvlink_generation, "4.0");
  EXPECT_EQ(t.nvlinks_per_gpu, 18);
  EXPECT_DOUBLE_EQ(t.nvlink_gbps_per_link, 25.0);
  ASSERT_EQ(t.reading.size(), 2u);
  EXPECT_TRUE(has(t.reading[0], "NVLink joins every pair (NV18, NVLink 4.0 through NVSwitch: about 450 GB/s per "
                                "direction per GPU). FSDP's extra traffic is cheap here"))
      << t.reading[0];
  EXPECT_TRUE(has(t.reading[1], "hang off 2 NUMA nodes")) << t.reading[1];
  const std::string text = topo_text(t);
  EXPECT_TRUE(has(text, "\nGPU4    NV18    NV18    NV18    NV18     X      NV18    NV18    NV18    56-111,168-223  1\n"))
      << text;
  EXPECT_TRUE(has(text, "NVLink: 4.0, up to 18 active links per GPU through NVSwitch, 25 GB/s per link per "
                        "direction: 450 GB/s per direction per GPU\n"))
      << text;
}

TEST(Topo, TwoSocketsWithNvlinkBridges) {
  Topology t = load("two_socket_bridged");
  EXPECT_EQ(t.link, (Matrix{{"X", "NV12", "SYS", "SYS"},
                            {"NV12", "X", "SYS", "SYS"},
                            {"SYS", "SYS", "X", "NV12"},
                            {"SYS", "SYS", "NV12", "X"}}));
  EXPECT_EQ(t.nvlinks[0][1], 12);  // remote bus ids written "0000:26:00.0" still match "00000000:26:00.0"
  EXPECT_EQ(t.nvlinks[0][2], 0);
  EXPECT_FALSE(t.nvswitch);
  EXPECT_EQ(t.nvlink_generation, "3.0");
  EXPECT_EQ(t.worst_link, "SYS");
  ASSERT_EQ(t.reading.size(), 3u);
  EXPECT_TRUE(has(t.reading[0], "NVLink joins only some pairs (2 of 6; slowest path: SYS)")) << t.reading[0];
  EXPECT_TRUE(has(t.reading[0], "prefer DDP with gradient accumulation")) << t.reading[0];
  EXPECT_TRUE(has(t.reading[1], "different CPU sockets (GPU0 and GPU2: SYS)")) << t.reading[1];
  EXPECT_TRUE(has(t.reading[2], "between GPU0 and GPU2 (CNS)")) << t.reading[2];
}

TEST(Topo, OneGpu) {
  Topology t = load("one_gpu");
  EXPECT_EQ(t.link, (Matrix{{"X"}}));
  ASSERT_EQ(t.reading.size(), 1u);
  EXPECT_TRUE(has(t.reading[0], "One GPU: there is nobody to communicate with")) << t.reading[0];
  EXPECT_TRUE(has(topo_text(t), "0    NVIDIA H200                 140.4 GiB  00000000:19:00.0  0     0-15\n"));
}

TEST(Topo, AnswersRoundTripAndJson) {
  const Json original = json_read_file(answers_path("two_socket_bridged"));
  const TopoAnswers a = topo_answers_from_json(original, "two_socket_bridged");
  EXPECT_EQ(topo_answers_to_json(a), original);
  const Json j = topo_json(build_topology(a));
  EXPECT_EQ(j["link_matrix"][0][1], "NV12");
  EXPECT_EQ(j["p2p_matrix"][1][3], "CNS");
  EXPECT_EQ(j["nvlink_generation"], "3.0");
  EXPECT_EQ(j["slowest_link"], "SYS");
  EXPECT_EQ(j["reading"].size(), 3u);
}

TEST(Topo, MalformedAnswersNameTheFile) {
  Json j = json_read_file(answers_path("pcie_4gpu"));
  j["common_ancestor"].erase(1);
  try {
    topo_answers_from_json(j, "broken.json");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kInvalidInput);
    EXPECT_TRUE(has(e.what(), "broken.json: 'common_ancestor' must be a 4 x 4 array")) << e.what();
  }
}

TEST(TopoCommand, ReadsAndRecordsAnswers) {
  const std::string out = testing::temp_dir("topo") + "/recorded.json";
  auto r = testing::run_anvil({"topo", "--answers", answers_path("pcie_4gpu"), "--record", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out;
  Json j = json_parse(r.out, "topo output");
  EXPECT_EQ(j["link_matrix"][0][2], "NODE");
  EXPECT_EQ(json_read_file(out), json_read_file(answers_path("pcie_4gpu")));
  auto text = testing::run_anvil({"topo", "--answers", answers_path("nvlink_8gpu_nvswitch")});
  ASSERT_EQ(text.exit_code, 0) << text.out;
  EXPECT_TRUE(has(text.out, "Links (as nvidia-smi topo -m):")) << text.out;
}

TEST(TopoCommand, WithoutADriverExitsWithCode3) {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib) {
    ::dlclose(lib);
    GTEST_SKIP() << "this machine has an NVIDIA driver";
  }
  auto r = testing::run_anvil({"topo"});
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_TRUE(has(r.out, "no NVIDIA driver: libnvidia-ml.so.1 could not be loaded")) << r.out;
}

}  // namespace
}  // namespace anvil
