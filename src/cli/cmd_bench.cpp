// anvil bench: collective bandwidth (nccl-tests style), GPU copy bandwidth, and (bench disk)
// the disk's sequential bandwidth.
//
// With --nproc-per-node this process launches the ranks (cli/launch.h), each of which is
// anvil bench again with RANK etc. set; without it, a worker joins from the environment,
// so torchrun, srun or mpirun can start the ranks too. One GPU has nobody to talk to: the
// bench says so and measures device copy bandwidth instead.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/launch.h"
#include "cli/config_flags.h"
#include "comm/bench.h"
#include "comm/device.h"
#include "core/error.h"
#include "core/env.h"
#include "core/fs.h"
#include "core/json.h"
#include "core/log.h"
#include "ops/ops.h"
#include "sys/disk_bench.h"
#include "train/bench_step.h"

namespace anvil {

namespace {

void print(const std::string& s) {
  std::fwrite(s.data(), 1, s.size(), stdout);
  std::fflush(stdout);
}

DType parse_dtype(const std::string& s) { return s == "fp32" ? DType::kF32 : DType::kBF16; }

// bench step --op-times: the per-step table, largest device time first, with the sum of the
// ops and the main queue's span (the difference: time between ops).
void print_op_times(const Json& t) {
  const Json& ops = t["ops"];
  if (ops.empty()) {
    std::fprintf(stderr, "op times: this device's ops are not timed (CUDA only)\n");
    return;
  }
  std::fprintf(stderr, "op times per step (mean of %d steps, main queue)\n%-64s %7s %10s %10s\n",
               t["steps"].get<int>(), "op (shape)", "calls", "device ms", "host ms");
  double device = 0, host = 0;
  for (const Json& op : ops) {
    device += op["device_ms"].get<double>();
    host += op["host_ms"].get<double>();
    std::fprintf(stderr, "%-64s %7.1f %10.3f %10.3f\n", op["op"].get<std::string>().c_str(),
                 op["calls"].get<double>(), op["device_ms"].get<double>(), op["host_ms"].get<double>());
  }
  std::fprintf(stderr, "%-64s %7s %10.3f %10.3f\n%-64s %7s %10.3f\n", "sum of the ops", "", device, host,
               "span, first op's start to last op's end", "", t["span_ms"].get<double>());
}

}  // namespace

namespace {

// anvil bench step: flags -> BenchStepOptions (its config tree) -> run_bench_step (train/bench_step.h).
int bench_step(int argc, char** argv) {
  BenchStepOptions o;
  TrainConfig& c = o.config;
  LaunchFlags launch;
  Args a("bench step", "Training-step benchmark on random weights and tokens: one JSON line with tokens/s, MFU, "
                       "the step-time breakdown and peak memory beside the plan's. Of the --steps, the first --warmup "
                       "are untimed; then up to 3 more time the phases. The flags of the model and the run read as "
                       "anvil train's.");
  bind_shared_sections(a, c);
  bind_device(a, c.model);
  bind_steps(a, &c.steps);
  bind_num_layers(a, &o.num_layers);
  a.opt("--warmup", &o.warmup, "N", "untimed first steps")
      .opt("--peak-tflops", &o.peak_tflops, "X", "the MFU denominator [default: the GPU's dense bf16 rate]")
      .flag("--op-times", &o.op_times,
            "then time every op of up to 3 more steps (main queue, device and host ms per step, by op and "
            "shape): a table on stderr and \"op_times\" in the JSON line")
      .opt("--write-op-table", &o.write_op_table, "FILE",
           "with --op-times --no-overlap-optimizer on one GPU: the op-cost table fitted to the timed ops, for anvil "
           "plan --op-table (src/plan/h200_op_costs.json is the built-in one)");
  bind_step_model(a, &o.op_table, &o.bus_gbps);
  launch.declare(a);
  if (!a.parse(argc, argv)) return 0;
  const bool on_gpu = c.model.device == "cuda" || (c.model.device.empty() && cuda_available());
  if (launch_if_requested("bench", launch, on_gpu, argc + 1, argv - 1)) return 0;  // argv[-1] is "step"
  const Json j = run_bench_step(o);
  if (comm_options_from_env().rank != 0) return 0;
  if (o.op_times) print_op_times(j["op_times"]);
  print(j.dump() + "\n");
  return 0;
}

// anvil bench disk DIR: the disk's sequential write (fsync included) and read bandwidth, with
// the requests checkpoints use (sys/disk_bench.h).
int bench_disk_cmd(int argc, char** argv) {
  std::string dir, size = "8G";
  int64_t threads = kDiskThreads;
  bool json = false;
  Args a("bench disk", "Sequential write and read bandwidth of the disk under DIR, like fio's sequential jobs (large\n"
                       "requests from several threads, the write's fsync timed): what an asynchronous save's writer\n"
                       "and a resume's reads can reach there.");
  a.positional("dir", &dir, "the folder to measure (a checkpoint folder: --ckpt-dir)")
      .opt("--size", &size, "SIZE", "bytes written and read back (8G; 512M, 64G)")
      .opt("--threads", &threads, "N", "requests in flight (the checkpoint writer's count by default)")
      .flag("--json", &json, "print one JSON line instead of two lines of text");
  if (!a.parse(argc, argv)) return 0;
  ANVIL_ENSURE(!dir.empty(), kUsage, "anvil bench disk: give the folder to measure: anvil bench disk DIR");
  ANVIL_ENSURE(is_directory(dir), kUsage, "anvil bench disk: ", dir, " is not a folder");
  const DiskBench b = bench_disk(dir, static_cast<uint64_t>(parse_size(size, "--size")), static_cast<int>(threads));
  if (json) {
    print(Json({{"dir", dir}, {"bytes", b.bytes}, {"threads", b.threads}, {"request_bytes", kDiskRequest},
                {"write_gbps", b.write_gbps()}, {"read_gbps", b.read_gbps()}, {"write_s", b.write_seconds},
                {"read_s", b.read_seconds}})
              .dump() +
          "\n");
    return 0;
  }
  char line[512];
  std::snprintf(line, sizeof line,
                "disk %s: write %.2f GB/s (%.2f GB in %.2f s, fsync included), read %.2f GB/s (%.2f s, cache "
                "dropped); %d threads of %llu MiB requests\n",
                dir.c_str(), b.write_gbps(), static_cast<double>(b.bytes) / 1e9, b.write_seconds, b.read_gbps(),
                b.read_seconds, b.threads, static_cast<unsigned long long>(kDiskRequest >> 20));
  print(line);
  return 0;
}

// One process on a GPU: collectives need two or more, so it measures what one GPU can (device
// copy bandwidth) and says so.
int bench_one_gpu(const CommOptions& co, const BenchOptions& o, const LaunchFlags& launch, bool json) {
  ANVIL_ENSURE(gpu_count() > 0, kNoDevice, "anvil bench: no GPU is visible (no driver, no GPU, or "
               "CUDA_VISIBLE_DEVICES empty); use --device cpu for CPU ranks");
  const std::string note = cat("collectives need two or more GPUs; this run has one (", gpu_count(),
                               " visible, --nproc-per-node ", launch.nproc.empty() ? "not given" : launch.nproc,
                               "), so it measures what one GPU can: device copy bandwidth");
  std::vector<CopyRow> rows = bench_device_copy(co.local_rank, o);
  if (json) {
    Json j = {{"mode", "device_copy"}, {"note", note}, {"gpu", co.local_rank}, {"rows", Json::array()}};
    for (const CopyRow& r : rows) j["rows"].push_back({{"bytes", r.bytes}, {"time_us", r.time_us}, {"gbps", r.gbps}});
    print(j.dump(2) + "\n");
  } else {
    print("# " + note + "\n" + copy_table(rows, co.local_rank));
  }
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  if (argc >= 1 && std::string(argv[0]) == "step") return bench_step(argc - 1, argv + 1);
  if (argc >= 1 && std::string(argv[0]) == "disk") return bench_disk_cmd(argc - 1, argv + 1);
  std::string what, min_b = "8", max_b, dtype = "bf16", device;
  LaunchFlags launch;
  int64_t iters = 20, warmup = 5, root = 0;
  double factor = 2.0;
  bool json = false;
  Args args("bench",
            "measure collective bandwidth like nccl-tests (all_reduce, all_gather, reduce_scatter, broadcast), "
            "or copy bandwidth between GPUs (p2p); GPUs (--device cuda) through NCCL, CPU ranks through TCP");
  args.positional("what", &what,
                  "all_reduce | all_gather | reduce_scatter | broadcast | p2p | step | disk (anvil bench step --help, "
                  "anvil bench disk --help)")
      .opt("-b,--minbytes", &min_b, "SIZE", "smallest size of the sweep (8, 64K, 4M, 1G)")
      .opt("-e,--maxbytes", &max_b, "SIZE",
           "largest size of the sweep [default: 4G on GPUs, 16M on the CPU; p2p: the copy size, 256M]")
      .opt("-f,--stepfactor", &factor, "F", "size multiplier between steps")
      .choice("--dtype", &dtype, {"bf16", "fp32"}, "element type")
      .opt("--iters", &iters, "N", "timed iterations per size")
      .opt("--warmup", &warmup, "N", "untimed iterations per size")
      .opt("--root", &root, "RANK", "root of broadcast")
      .flag("--json", &json, "print JSON instead of the table");
  bind_device(args, &device);
  launch.declare(args);
  if (!args.parse(argc, argv)) return 0;

  const bool on_gpu = device_or_default(device, "bench") == "cuda";
  if (what == "p2p") {
    ANVIL_ENSURE(on_gpu, kUsage, "anvil bench p2p: it measures GPUs only (",
                 device.empty() ? "there is none here" : "drop --device cpu", ")");
    const int64_t bytes = parse_size(max_b.empty() ? "256M" : max_b, "-e");
    P2pReport r = bench_p2p(bytes, static_cast<int>(iters), static_cast<int>(warmup));
    print(json ? p2p_json(r).dump(2) + "\n" : p2p_table(r));
    return 0;
  }
  BenchOptions o;
  ANVIL_ENSURE(bench_collective_from_name(what, &o.collective), kUsage, "anvil bench: unknown benchmark '", what,
               "' (all_reduce, all_gather, reduce_scatter, broadcast or p2p)");
  o.min_bytes = parse_size(min_b, "-b");
  o.max_bytes = parse_size(max_b.empty() ? (on_gpu ? "4G" : "16M") : max_b, "-e");
  o.factor = factor;
  o.dtype = parse_dtype(dtype);
  o.iters = static_cast<int>(iters);
  o.warmup = static_cast<int>(warmup);
  o.root = static_cast<int>(root);
  bench_sizes(o, 1);  // usage errors before any worker starts

  if (launch_if_requested("bench", launch, on_gpu, argc, argv)) return 0;

  CommOptions co = comm_options_from_env();
  if (co.world > 1) log_set_rank(co.rank);
  if (on_gpu && co.world == 1) return bench_one_gpu(co, o, launch, json);
  std::unique_ptr<Comm> comm = make_comm(on_gpu ? Device::kCUDA : Device::kCPU, co);
  BenchReport report = run_bench(*comm, o);
  if (comm->rank() == 0) print(json ? bench_json(report).dump(2) + "\n" : bench_table(report));
  ANVIL_ENSURE(report.wrong() == 0, kComm, "anvil bench ", what, ": ", report.wrong(),
               " wrong values after the timed loop: the ", comm->backend(), " comm corrupts data");
  return 0;
}

}  // namespace anvil
