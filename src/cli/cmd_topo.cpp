// anvil topo: the GPUs, how they are linked (as nvidia-smi topo -m and -p2p p show it),
// NVLink generation and bandwidth, and what that means for DDP and FSDP.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "core/fs.h"
#include "core/json.h"
#include "sys/nvml.h"
#include "sys/topo.h"

namespace anvil {

int cmd_topo(int argc, char** argv) {
  std::string answers_path, record_path;
  bool json = false;
  Args args("topo", "how the GPUs of this machine are linked, and what that means for DDP and FSDP");
  args.flag("--json", &json, "print JSON for scripts")
      .opt("--answers", &answers_path, "FILE", "read recorded NVML answers (from --record) instead of asking the driver")
      .opt("--record", &record_path, "FILE", "also write the driver's raw answers to FILE");
  if (!args.parse(argc, argv)) return 0;
  const TopoAnswers answers =
      answers_path.empty() ? nvml_topo_answers() : topo_answers_from_json(json_read_file(answers_path), answers_path);
  if (!record_path.empty()) json_write_file(record_path, topo_answers_to_json(answers));
  const Topology t = build_topology(answers);
  const std::string out = json ? topo_json(t).dump(2) + "\n" : topo_text(t);
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

}  // namespace anvil
