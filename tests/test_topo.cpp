// anvil topo from recorded (fake) NVML answers: PCIe only, NVSwitch, two sockets with
// NVLink bridges, one GPU. The matrices are checked cell by cell against what
// nvidia-smi topo -m / -p2p p print for such machines, the printed tables cell by cell (not
// their spacing), and the reading by the facts it states (link codes, GPUs named, figures,
// the mode it advises), not its wording.
#include <dlfcn.h>

#include <algorithm>
#include <sstream>

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

std::vector<std::string> words(const std::string& line) {  // whitespace-separated, outer punctuation off
  std::vector<std::string> out;
  std::istringstream in(line);
  for (std::string w; in >> w;) {
    while (!w.empty() && std::string(",.;:()").find(w.back()) != std::string::npos) w.pop_back();
    while (!w.empty() && w.front() == '(') w.erase(0, 1);
    if (!w.empty()) out.push_back(w);
  }
  return out;
}

// The cells of every line of `text` that begins with the cell `head` (column headers, which
// are indented, are not rows), in order.
std::vector<std::vector<std::string>> rows_of(const std::string& text, const std::string& head) {
  std::vector<std::vector<std::string>> rows;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::istringstream cells(line);
    std::vector<std::string> r;
    for (std::string c; cells >> c;) r.push_back(c);
    if (!r.empty() && r[0] == head && line.rfind(head, 0) == 0) rows.push_back(r);
  }
  return rows;
}

// The reading states every fact given (each a word of it: a link code, a GPU, a number, a mode).
::testing::AssertionResult states(const std::string& reading, const std::vector<std::string>& facts) {
  const auto w = words(reading);
  for (const auto& f : facts)
    if (std::find(w.begin(), w.end(), f) == w.end()) return ::testing::AssertionFailure() << "no '" << f << "' in: " << reading;
  return ::testing::AssertionSuccess();
}

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
  EXPECT_TRUE(states(t.reading[0], {"PCIe", "NODE", "DDP", "FSDP"}));
  EXPECT_TRUE(states(t.reading[1], {"GPU0", "GPU2", "TNS"}));
  const std::string text = topo_text(t);
  // Link table (with CPU and NUMA affinity) first, then the P2P table.
  ASSERT_EQ(rows_of(text, "GPU0").size(), 2u) << text;
  EXPECT_EQ(rows_of(text, "GPU0")[0], (std::vector<std::string>{"GPU0", "X", "PXB", "NODE", "NODE", "0-31", "0"}));
  EXPECT_EQ(rows_of(text, "GPU3")[1], (std::vector<std::string>{"GPU3", "TNS", "TNS", "OK", "X"}));
  ASSERT_EQ(rows_of(text, "NVLink:").size(), 1u) << text;
  EXPECT_TRUE(states(text.substr(text.find("NVLink:")), {"none"}));
  ASSERT_EQ(rows_of(text, "0").size(), 1u) << text;
  EXPECT_EQ(rows_of(text, "0")[0],
            (std::vector<std::string>{"0", "NVIDIA", "L40S", "45.0", "GiB", "00000000:17:00.0", "0", "0-31"}));
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
  EXPECT_TRUE(states(t.reading[0], {"NV18", "4.0", "NVSwitch", "450", "FSDP"}));
  EXPECT_TRUE(states(t.reading[1], {"2", "NUMA"}));
  const std::string text = topo_text(t);
  EXPECT_EQ(rows_of(text, "GPU4").at(0), (std::vector<std::string>{"GPU4", "NV18", "NV18", "NV18", "NV18", "X", "NV18",
                                                                   "NV18", "NV18", "56-111,168-223", "1"}))
      << text;
  ASSERT_EQ(rows_of(text, "NVLink:").size(), 1u) << text;
  const std::string nvlink = text.substr(text.find("NVLink:"), text.find('\n', text.find("NVLink:")) - text.find("NVLink:"));
  EXPECT_TRUE(states(nvlink, {"4.0", "18", "NVSwitch", "25", "450"}));
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
  EXPECT_TRUE(states(t.reading[0], {"NVLink", "2", "6", "SYS", "DDP"}));
  EXPECT_TRUE(states(t.reading[1], {"GPU0", "GPU2", "SYS"}));
  EXPECT_TRUE(states(t.reading[2], {"GPU0", "GPU2", "CNS"}));
}

TEST(Topo, OneGpu) {
  Topology t = load("one_gpu");
  EXPECT_EQ(t.link, (Matrix{{"X"}}));
  ASSERT_EQ(t.reading.size(), 1u);
  EXPECT_TRUE(states(t.reading[0], {"One", "GPU"}));
  EXPECT_EQ(rows_of(topo_text(t), "0").at(0),
            (std::vector<std::string>{"0", "NVIDIA", "H200", "140.4", "GiB", "00000000:19:00.0", "0", "0-15"}));
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
  EXPECT_EQ(rows_of(text.out, "GPU7").size(), 2u) << text.out;  // both tables, all 8 GPUs
}

TEST(TopoCommand, WithoutADriverExitsWithCode3) {
  void* lib = ::dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib) {
    ::dlclose(lib);
    ANVIL_SKIP_UNLESS_REQUIRED(testing::in_ci(), "this machine has an NVIDIA driver (libnvidia-ml.so.1 loads): the "
                                                 "no-driver path cannot run here (CI=true has no GPU, so needs it)");
  }
  auto r = testing::run_anvil({"topo"});
  EXPECT_EQ(r.exit_code, 3) << r.out;
  EXPECT_TRUE(has(r.out, "no NVIDIA driver: libnvidia-ml.so.1 could not be loaded")) << r.out;
}

}  // namespace
}  // namespace anvil
