// Parameters between Hugging Face safetensors and the flat units (model/weights.h), and
// their initialisation.
#include "model/weights.h"

#include <cmath>
#include <algorithm>
#include <map>
#include <memory>
#include <random>
#include <set>

#include "core/bf16.h"
#include "core/error.h"
#include "core/log.h"
#include "core/threads.h"
#include "io/safetensors.h"

namespace anvil {

HostUnits make_host_units(const ParamTable& table) {
  HostUnits units;
  for (auto& u : table.units()) units.emplace_back(static_cast<size_t>(u.padded), 0.0f);
  return units;
}

UnitReader host_units_reader(const HostUnits& units) {
  return [&units](int unit, int64_t begin, int64_t end, float* out) {
    // Units padded for fewer ranks end before the reader's padding does: that is zero too.
    const std::vector<float>& u = units[static_cast<size_t>(unit)];
    const int64_t have = std::clamp<int64_t>(static_cast<int64_t>(u.size()), begin, end);
    std::copy(u.begin() + begin, u.begin() + have, out);
    std::fill(out + (have - begin), out + (end - begin), 0.0f);
  };
}

UnitReader host_units_reader(const HostUnits& units, const ParamTable& from, const ParamTable& to) {
  auto place = std::make_shared<std::map<std::string, const ParamEntry*>>();
  for (const ParamEntry& e : from.entries()) (*place)[e.name] = &e;
  return [&units, &to, place](int unit, int64_t begin, int64_t end, float* out) {
    std::fill(out, out + (end - begin), 0.0f);
    for (const ParamEntry& e : to.entries()) {
      if (e.unit != unit || e.offset >= end || e.offset + e.numel() <= begin) continue;
      auto it = place->find(e.name);
      ANVIL_ENSURE(it != place->end(), kInternal, e.name, " is not in the other layout");
      const int64_t lo = std::max(begin, e.offset), hi = std::min(end, e.offset + e.numel());
      const float* src = units[static_cast<size_t>(it->second->unit)].data() + it->second->offset;
      std::copy(src + (lo - e.offset), src + (hi - e.offset), out + (lo - begin));
    }
  };
}

void copy_by_name(const ParamTable& from, const HostUnits& from_units, const ParamTable& to, HostUnits& to_units) {
  std::map<std::string, const ParamEntry*> place;
  for (const ParamEntry& e : to.entries()) place[e.name] = &e;
  for (const ParamEntry& e : from.entries()) {
    auto it = place.find(e.name);
    if (it == place.end()) continue;
    const float* src = from_units[static_cast<size_t>(e.unit)].data() + e.offset;
    std::copy(src, src + e.numel(), to_units[static_cast<size_t>(it->second->unit)].data() + it->second->offset);
  }
}

namespace {

// One tensor of the folder and where it goes: all of it, or (a fused experts tensor under
// expert parallelism) `count` elements from element `from` on.
struct TensorRead {
  std::string name;
  int unit = 0;
  int64_t offset = 0;
  Shape shape;
  int64_t from = 0, count = -1;
  int64_t numel() const { return count < 0 ? shape.numel() : count; }
  bool whole() const { return count < 0 || count == shape.numel(); }
};

// The tensors to read, in the table's order: its entries, except where the folder holds a
// sparse layer's experts as one tensor (transformers 5's fused layout, FusedExperts) and not
// per expert: that tensor then, in place of the per-expert entries it covers.
std::vector<TensorRead> tensor_reads(const SafetensorsSet& set, const ParamTable& table) {
  std::vector<const FusedExperts*> fused;
  for (const FusedExperts& f : table.fused_experts())
    if (!set.find(f.first) && set.find(f.name)) fused.push_back(&f);
  std::vector<TensorRead> reads;
  for (const ParamEntry& e : table.entries()) {
    const FusedExperts* in = nullptr;
    for (const FusedExperts* f : fused)
      if (f->unit == e.unit && e.offset >= f->offset && e.offset < f->offset + f->held) in = f;
    if (!in) reads.push_back({e.name, e.unit, e.offset, e.shape});
    else if (e.offset == in->offset) reads.push_back({in->name, in->unit, in->offset, in->shape, in->from, in->held});
  }
  return reads;
}

void warn_unused(const std::string& model_dir, const SafetensorsSet& set, const std::vector<TensorRead>& reads,
                 bool other_experts) {
  std::set<std::string> used;
  for (const TensorRead& r : reads) used.insert(r.name);
  std::string unused;
  int n_unused = 0;
  for (auto& name : set.names()) {
    if (used.count(name) || name.find("rotary_emb.inv_freq") != std::string::npos) continue;
    if (name == "lm_head.weight") continue;  // tied: transformers ignores it too
    if (other_experts && name.find(".mlp.experts.") != std::string::npos) continue;  // other ranks' (expert parallel)
    if (n_unused++ < 3) unused += (unused.empty() ? "" : ", ") + name;
  }
  if (n_unused > 0)
    log_warn(model_dir, ": ", n_unused, " tensor(s) not used by the model (", unused, n_unused > 3 ? ", ..." : "", ")");
}
}  // namespace

UnitReader hf_weights_reader(const std::string& model_dir, const ParamTable& table) {
  auto set = std::make_shared<SafetensorsSet>(model_dir);
  auto reads = std::make_shared<std::vector<TensorRead>>(tensor_reads(*set, table));
  warn_unused(model_dir, *set, *reads, table.expert_layout().degree > 1);
  return [set, reads](int unit, int64_t begin, int64_t end, float* out) {
    std::fill(out, out + (end - begin), 0.0f);
    std::vector<float> whole;  // one tensor, when only part of it is wanted
    for (const TensorRead& e : *reads) {
      if (e.unit != unit || e.offset >= end || e.offset + e.numel() <= begin) continue;
      const int64_t lo = std::max(begin, e.offset), hi = std::min(end, e.offset + e.numel());
      if (e.whole() && lo == e.offset && hi == e.offset + e.numel()) {
        set->read_f32(e.name, e.shape, out + (lo - begin));
      } else {
        whole.resize(static_cast<size_t>(e.shape.numel()));
        set->read_f32(e.name, e.shape, whole.data());
        const int64_t skip = e.from - e.offset;  // elements of the tensor before the unit's offset 0
        std::copy(whole.begin() + (skip + lo), whole.begin() + (skip + hi), out + (lo - begin));
      }
      if (const SafeTensorInfo* t = set->find(e.name)) release_mapped_pages(t->data, t->bytes);
    }
  };
}

void load_hf_weights(const std::string& model_dir, const ParamTable& table, HostUnits& units) {
  SafetensorsSet set(model_dir);
  const std::vector<TensorRead> reads = tensor_reads(set, table);
  std::vector<float> whole;  // a part of a fused experts tensor (expert parallel)
  for (const TensorRead& e : reads) {
    float* out = units[static_cast<size_t>(e.unit)].data() + e.offset;
    if (e.whole()) {
      set.read_f32(e.name, e.shape, out);
      continue;
    }
    whole.resize(static_cast<size_t>(e.shape.numel()));
    set.read_f32(e.name, e.shape, whole.data());
    std::copy_n(whole.begin() + e.from, e.numel(), out);
  }
  warn_unused(model_dir, set, reads, table.expert_layout().degree > 1);
}
void init_weights(const ModelConfig& config, const ParamTable& table, uint64_t seed, HostUnits& units) {
  // Each tensor is cut into fixed chunks with their own generator, seeded from (seed,
  // tensor, chunk): the same weights whatever the number of threads, and a 32B model
  // initialises in seconds on a many-core host.
  constexpr int64_t kChunk = 1 << 20;
  const auto& entries = table.entries();
  for (size_t k = 0; k < entries.size(); ++k) {
    const ParamEntry& e = entries[k];
    float* p = units[static_cast<size_t>(e.unit)].data() + e.offset;
    const int64_t n = e.numel();
    const bool is_norm = e.name.find("norm") != std::string::npos;
    const bool is_bias = e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, ".bias") == 0;
    if (is_norm || is_bias) {
      std::fill(p, p + n, is_norm ? 1.0f : 0.0f);
      continue;
    }
    parallel_for((n + kChunk - 1) / kChunk, 1, [&](int64_t cb, int64_t ce) {
      for (int64_t c = cb; c < ce; ++c) {
        std::seed_seq seq{seed, static_cast<uint64_t>(k), static_cast<uint64_t>(c)};
        std::mt19937_64 rng(seq);
        std::normal_distribution<float> normal(0.0f, static_cast<float>(config.initializer_range));
        for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) p[i] = normal(rng);
      }
    });
  }
}

void save_hf_weights(const std::string& path, const ParamTable& table, const HostUnits& units, DType dtype) {
  ANVIL_ENSURE(dtype == DType::kF32 || dtype == DType::kBF16, kUnsupported, "export dtype ", dtype_name(dtype));
  std::vector<std::vector<uint16_t>> bf16_copies;
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  for (auto& e : table.entries()) {
    const float* p = units[static_cast<size_t>(e.unit)].data() + e.offset;
    if (dtype == DType::kF32) {
      w.add(e.name, dtype, e.shape, p);
    } else {
      bf16_copies.emplace_back(static_cast<size_t>(e.numel()));
      for (int64_t i = 0; i < e.numel(); ++i) bf16_copies.back()[static_cast<size_t>(i)] = f32_to_bf16_bits(p[i]);
      w.add(e.name, dtype, e.shape, bf16_copies.back().data());
    }
  }
  w.write(path);
}

}  // namespace anvil
