// The op-cost table and the GPUs' datasheet figures (plan/op_costs.h).
#include "plan/op_costs.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "core/log.h"

namespace anvil {

namespace {

// Dense bf16 and FP8 tensor-core peaks (FP8: 0 before Ada) and HBM bandwidths from the vendors' datasheets (SXM parts
// unless named), first match wins (so "L40S" before "L40", "A100" before "A10"). bus_gbps:
// the all-reduce bus bandwidth (nccl-tests' busbw) assumed over the usual link of an 8-GPU
// machine of that part: NVLink 4 through NVSwitch 360 GB/s (published nccl-tests runs on
// 8 x H100 with the ring alone: 365-370 GB/s all-reduce, 350-360 reduce-scatter and
// all-gather; NVLink SHARP, which anvil leaves off, reads 464-482 on 8 x H200; 80% of 18
// links of 25 GB/s per direction), NVLink 3 240 and NVLink 5 720 by the same 80%; PCIe
// gen4/gen5 through the host 20/40 (published 8-GPU PCIe servers: 20-35 GB/s).
// Assumptions until `anvil bench` measures the machine: pass its figure as --bus-gbps.
const GpuSpec kGpus[] = {
    {"H100 PCIe", 756.0, 1513.0, 2.0, "PCIe gen5", 40},
    {"H100", 989.4, 1978.9, 3.35, "NVLink 4 via NVSwitch", 360},
    {"H200", 989.4, 1978.9, 4.8, "NVLink 4 via NVSwitch", 360},
    {"GH200", 989.4, 1978.9, 4.0, "NVLink 4 via NVSwitch", 360},
    {"H800", 989.4, 1978.9, 3.35, "NVLink 4 (400 GB/s)", 160},
    {"B200", 2250.0, 4500.0, 8.0, "NVLink 5 via NVSwitch", 720},
    {"B100", 1750.0, 3500.0, 8.0, "NVLink 5 via NVSwitch", 720},
    {"A100", 312.0, 0, 2.039, "NVLink 3 via NVSwitch", 240},
    {"A800", 312.0, 0, 2.039, "NVLink 3 (400 GB/s)", 160},
    {"L40S", 362.1, 733.0, 0.864, "PCIe gen4", 20},
    {"L40", 181.0, 362.1, 0.864, "PCIe gen4", 20},
    {"L4", 121.0, 242.5, 0.3, "PCIe gen4", 20},
    {"4090", 165.2, 0, 1.008, "PCIe gen4", 20},
    {"A10", 125.0, 0, 0.6, "PCIe gen4", 20}};

// The rate of `op` at `size` (0: the table has none): between the two sizes measured around
// it, linear in log(size); past the smallest or largest, that size's rate; an entry of any
// size (0) only where no size was measured.
double rate_at(const std::vector<OpRate>& rates, const std::string& op, int64_t size) {
  const OpRate *below = nullptr, *above = nullptr, *any = nullptr;
  for (const OpRate& r : rates) {
    if (r.op != op) continue;
    if (r.size == 0) any = &r;
    else if (r.size <= size && (!below || r.size > below->size)) below = &r;
    else if (r.size > size && (!above || r.size < above->size)) above = &r;
  }
  if (below && above) {
    const double f = std::log(static_cast<double>(size) / static_cast<double>(below->size)) /
                     std::log(static_cast<double>(above->size) / static_cast<double>(below->size));
    return below->rate + f * (above->rate - below->rate);
  }
  return below ? below->rate : above ? above->rate : any ? any->rate : 0;
}

}  // namespace

const GpuSpec* find_gpu_spec(const std::string& name) {
  for (const GpuSpec& g : kGpus)
    if (name.find(g.key) != std::string::npos) return &g;
  return nullptr;
}

std::string known_gpu_names() {
  std::string s;
  for (const GpuSpec& g : kGpus) s += (s.empty() ? "" : ", ") + std::string(g.key);
  return s;
}

double topology_bus_gbps(const Topology& t, std::string* why) {
  if (t.gpus < 2) {
    *why = "fewer than two GPUs here";
    return 0;
  }
  if (t.worst_link.rfind("NV", 0) == 0) {
    const double gbps = 0.8 * t.nvlinks_per_gpu * t.nvlink_gbps_per_link;
    *why = cat("anvil topo: NVLink ", t.nvlink_generation, t.nvswitch ? " via NVSwitch" : "", ", ", t.nvlinks_per_gpu,
               " links of ", t.nvlink_gbps_per_link, " GB/s per direction, 80% of them");
    return gbps;
  }
  *why = cat("anvil topo: the slowest path is ", t.worst_link, " (PCIe through the host), 20 GB/s assumed");
  return 20;
}

bool op_priced_by_flops(const std::string& op) {
  return op == "linear_forward" || op == "linear_backward_input" || op == "linear_backward_weight" ||
         op.rfind("linear_fp8_", 0) == 0 || op.rfind("moe_linear_", 0) == 0 || op == "attention_forward" || op == "attention_backward" ||
         op == "cross_entropy_forward_backward";
}

OpCostTable OpCostTable::builtin() {
  return from_json(json_parse(builtin_op_table_json(), "h200_op_costs.json"), "the built-in H200 table");
}

OpCostTable OpCostTable::load(const std::string& path) {
  return path.empty() ? builtin() : from_json(json_read_file(path), path);
}

OpCostTable OpCostTable::from_json(const Json& j, const std::string& what) {
  OpCostTable t;
  try {
    t.gpu = j.at("gpu").get<std::string>();
    t.peak_tflops = j.at("peak_tflops").get<double>();
    t.hbm_tbps = j.at("hbm_tbps").get<double>();
    t.per_op_us = j.value("per_op_us", 0.0);
    t.comm_overlap_cost = j.value("comm_overlap_cost", 0.0);
    t.per_op_calls = j.value("per_op_calls", 0.0);
    t.measured = j.at("measured").get<bool>();
    t.source = j.value("source", "");
    for (const Json& r : j.at("ops")) {
      OpRate o;
      o.op = r.at("op").get<std::string>();
      o.size = r.value("size", int64_t{0});
      o.rate = r.at(op_priced_by_flops(o.op) ? "tflops" : "tbps").get<double>();
      o.measured = r.value("measured", t.measured);
      ANVIL_ENSURE(o.rate > 0, kInvalidInput, "rate of ", o.op, " is ", o.rate);
      t.rates.push_back(o);
    }
  } catch (const Json::exception& e) {
    raise(ErrorKind::kInvalidInput, "op-cost table ", what, ": ", e.what(),
          " (write one with anvil bench step --op-times --write-op-table FILE)");
  }
  ANVIL_ENSURE(t.peak_tflops > 0 && t.hbm_tbps > 0, kInvalidInput, "op-cost table ", what,
               ": peak_tflops and hbm_tbps must be positive");
  ANVIL_ENSURE(t.comm_overlap_cost >= 0, kInvalidInput, "op-cost table ", what, ": comm_overlap_cost ",
               t.comm_overlap_cost, " is negative (0: the compute keeps its speed beside a collective)");
  return t;
}

Json OpCostTable::to_json() const {
  Json ops = Json::array();
  for (const OpRate& r : rates) {
    Json o = {{"op", r.op}, {op_priced_by_flops(r.op) ? "tflops" : "tbps", r.rate}, {"measured", r.measured}};
    if (r.size) o["size"] = r.size;
    ops.push_back(o);
  }
  return Json{{"gpu", gpu},           {"peak_tflops", peak_tflops},
              {"hbm_tbps", hbm_tbps}, {"per_op_us", per_op_us}, {"per_op_calls", per_op_calls},
              {"comm_overlap_cost", comm_overlap_cost},
              {"measured", measured}, {"source", source},
              {"ops", ops}};
}

std::string OpCostTable::why_not_fp8(const GpuSpec& g) const {
  if (g.peak_fp8_tflops <= 0) return cat("the ", g.key, " has no FP8 tensor cores");
  bool linears = false, casts = false;
  for (const OpRate& r : rates) {
    linears = linears || r.op.rfind("linear_fp8_", 0) == 0;
    casts = casts || r.op == kFp8CastOp;
  }
  if (linears && casts) return "";
  return cat("the op-cost table of ", gpu, " has no FP8 ", linears ? "cast" : "linear",
             " rates (measure them with anvil bench step --fp8 tensorwise --op-times --write-op-table FILE)");
}

double OpCostTable::seconds(const OpCall& c, const GpuSpec& g) const {
  auto rate = [&](const std::string& op) {
    double r = rate_at(rates, op, c.size);
    if (r <= 0 && op == c.op && !c.kin.empty()) r = rate_at(rates, c.kin, c.size);  // none of its own: its kin's
    ANVIL_ENSURE(r > 0, kInvalidInput, "the op-cost table of ", gpu, " has no rate for ", op,
                 " (measure one with anvil bench step --op-times --write-op-table FILE)");
    return r * 1e12 * (op_priced_by_flops(op) ? g.peak_tflops / peak_tflops : g.hbm_tbps / hbm_tbps);
  };
  double s = op_priced_by_flops(c.op) ? c.flops / rate(c.op) : c.bytes / rate(c.op);
  if (c.cast_bytes > 0) s += c.cast_bytes / rate(kFp8CastOp);
  return std::max(0.0, s + per_op_us * 1e-6);  // a fitted per_op_us may be negative (the events' cost)
}

// A call smaller than this is timed by its launch, not by its work: its rate, extrapolated
// to the op's large calls (an FSDP shard's zeroing from the 4-byte loss sum's), would price
// them thousands of times too slow. Such calls are left to per_op_us.
constexpr double kMinRatedBytes = 1 << 20, kMinRatedFlops = 1e8;

namespace {

// One label of the FP8 linears of one row count: its op, its calls' FLOPs and cast bytes, their seconds.
struct Fp8Label {
  std::string op;
  double flops = 0, cast_bytes = 0, s = 0;
};

// x solving a x = b (n x n, row-major) by Gaussian elimination with partial pivoting; false
// when a is singular.
bool solve(std::vector<double> a, std::vector<double> b, std::vector<double>* x) {
  const size_t n = b.size();
  for (size_t c = 0; c < n; ++c) {
    size_t p = c;
    for (size_t r = c + 1; r < n; ++r)
      if (std::fabs(a[r * n + c]) > std::fabs(a[p * n + c])) p = r;
    if (std::fabs(a[p * n + c]) < 1e-9) return false;  // the columns are scaled to unit length
    for (size_t k = 0; k < n; ++k) std::swap(a[c * n + k], a[p * n + k]);
    std::swap(b[c], b[p]);
    for (size_t r = c + 1; r < n; ++r) {
      const double f = a[r * n + c] / a[c * n + c];
      for (size_t k = c; k < n; ++k) a[r * n + k] -= f * a[c * n + k];
      b[r] -= f * b[c];
    }
  }
  x->assign(n, 0);
  for (size_t c = n; c-- > 0;) {
    double v = b[c];
    for (size_t k = c + 1; k < n; ++k) v -= a[c * n + k] * (*x)[k];
    (*x)[c] = v / a[c * n + c];
  }
  return true;
}

// The FP8 linears of `rows` rows: seconds = FLOPs / (the op's GEMM rate) + cast bytes / (the
// casts' rate), one GEMM rate per op and one cast rate, fitted to the labels' seconds by least
// squares (the labels' shapes differ in cast bytes per FLOP: weights cast whatever the rows).
// Nothing is added where they do not separate (one shape, or a rate that comes out negative).
void fit_fp8_linears(int64_t rows, const std::vector<Fp8Label>& labels, OpCostTable* t) {
  std::vector<std::string> ops;
  for (const Fp8Label& l : labels)
    if (std::find(ops.begin(), ops.end(), l.op) == ops.end()) ops.push_back(l.op);
  const size_t n = ops.size() + 1;  // each op's seconds per FLOP, then the casts' per byte
  std::vector<std::vector<double>> cols(n, std::vector<double>(labels.size(), 0));
  for (size_t i = 0; i < labels.size(); ++i) {
    cols[static_cast<size_t>(std::find(ops.begin(), ops.end(), labels[i].op) - ops.begin())][i] = labels[i].flops;
    cols[n - 1][i] = labels[i].cast_bytes;
  }
  std::vector<double> scale(n, 0), ata(n * n, 0), atb(n, 0), x;
  for (size_t c = 0; c < n; ++c) {
    for (double v : cols[c]) scale[c] += v * v;
    scale[c] = std::sqrt(scale[c]);
  }
  for (size_t r = 0; r < n; ++r) {
    for (size_t i = 0; i < labels.size(); ++i) atb[r] += cols[r][i] / scale[r] * labels[i].s;
    for (size_t c = 0; c < n; ++c)
      for (size_t i = 0; i < labels.size(); ++i) ata[r * n + c] += cols[r][i] / scale[r] * cols[c][i] / scale[c];
  }
  bool ok = labels.size() >= n && solve(ata, atb, &x);
  for (size_t c = 0; ok && c < n; ++c) ok = x[c] > 0;
  if (!ok) {
    log_warn("op-cost fit: the FP8 linears' times at ", rows, " rows do not separate into GEMM and cast time (",
             labels.size(), " shapes); no FP8 rates at that size");
    return;
  }
  for (size_t c = 0; c + 1 < n; ++c) t->rates.push_back({ops[c], rows, scale[c] / x[c] / 1e12, true});
  t->rates.push_back({kFp8CastOp, rows, scale[n - 1] / x[n - 1] / 1e12, true});
}

}  // namespace

OpCostTable fit_op_table(const std::vector<StepItem>& program, const std::vector<Runtime::OpTime>& measured,
                         double step_ms, const GpuSpec& gpu, const std::string& source) {
  // Each label's call, its work the mean of the step's calls of it (an FP8 linear's casts
  // differ between MLP tiles of one shape: the first takes the weight's amax).
  std::map<std::string, std::pair<OpCall, double>> by_label;
  for (const StepItem& it : program) {
    if (it.kind != StepItem::Kind::kOp) continue;
    auto [e, fresh] = by_label.emplace(it.op.label(), std::pair{it.op, 1.0});
    if (fresh) continue;
    OpCall& c = e->second.first;
    const double n = ++e->second.second;
    c.flops += (it.op.flops - c.flops) / n;
    c.bytes += (it.op.bytes - c.bytes) / n;
    c.cast_bytes += (it.op.cast_bytes - c.cast_bytes) / n;
  }
  struct Sum {
    double work = 0, ms = 0;
  };
  std::map<std::pair<std::string, int64_t>, Sum> sums;
  std::map<int64_t, std::vector<Fp8Label>> fp8;  // by rows
  double ops_ms = 0, calls = 0;
  for (const Runtime::OpTime& m : measured) {
    ops_ms += m.device_ms;
    calls += static_cast<double>(m.calls);
    auto it = by_label.find(m.op);
    if (it == by_label.end()) continue;  // not an op of the model's step (none expected)
    const OpCall& c = it->second.first;
    const double work = op_priced_by_flops(c.op) ? c.flops : c.bytes;
    if (work < (op_priced_by_flops(c.op) ? kMinRatedFlops : kMinRatedBytes)) continue;
    const double n = static_cast<double>(m.calls);
    if (c.cast_bytes > 0) {
      fp8[c.size].push_back({c.op, n * c.flops, n * c.cast_bytes, m.device_ms * 1e-3});
      continue;
    }
    Sum& s = sums[{c.op, c.size}];
    s.work += static_cast<double>(m.calls) * work;
    s.ms += m.device_ms;
  }
  OpCostTable t;
  t.gpu = gpu.key;
  t.peak_tflops = gpu.peak_tflops;
  t.hbm_tbps = gpu.hbm_tbps;
  t.measured = true;
  t.source = source;
  t.per_op_us = calls > 0 ? 1e3 * (step_ms - ops_ms) / calls : 0;
  t.per_op_calls = calls;
  for (const auto& [key, s] : sums)
    if (s.ms > 0 && s.work > 0) t.rates.push_back({key.first, key.second, s.work / (s.ms * 1e-3) / 1e12, true});
  for (const auto& [rows, labels] : fp8) fit_fp8_linears(rows, labels, &t);
  return t;
}

OpCostTable merge_op_tables(const OpCostTable& fit, const OpCostTable& base) {
  OpCostTable t = fit;
  const bool earlier_fit = base.measured && base.gpu == fit.gpu;
  auto has = [&](const OpRate& r, bool any_size) {
    for (const OpRate& f : fit.rates)
      if (f.op == r.op && (any_size || f.size == r.size)) return true;
    return false;
  };
  for (OpRate r : base.rates) {
    if (has(r, false) || (!(earlier_fit && r.measured) && has(r, true))) continue;
    r.rate *= op_priced_by_flops(r.op) ? fit.peak_tflops / base.peak_tflops : fit.hbm_tbps / base.hbm_tbps;
    r.measured = r.measured && earlier_fit;
    t.rates.push_back(r);
  }
  t.comm_overlap_cost = base.comm_overlap_cost;  // one GPU has no collectives to measure it by
  if (!earlier_fit) return t;
  t.per_op_calls = fit.per_op_calls + base.per_op_calls;
  if (t.per_op_calls > 0)
    t.per_op_us = (fit.per_op_us * fit.per_op_calls + base.per_op_us * base.per_op_calls) / t.per_op_calls;
  t.source = base.source + "; " + fit.source;
  return t;
}

}  // namespace anvil
