// Reading and writing config.json (model/config.h), the presets, and RoPE's frequencies.
#include "model/config.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "core/error.h"
#include "core/fs.h"

namespace anvil {
namespace {

// The largest model anvil builds: far beyond any published dense model (405B parameters, 126
// layers), and small enough that its sizes multiply in int64 without overflow.
constexpr int64_t kMaxLayers = 4096;
constexpr double kMaxParameters = 17592186044416.0;  // 2^44

// The parameter count (a tied embedding once) in T: int64_t for num_parameters, double for
// the bound on sizes that would overflow int64.
template <class T>
T count_parameters(const ModelConfig& m) {
  const T c = T(m.hidden_size), q = T(m.num_heads) * T(m.head_dim), kv = T(m.num_kv_heads) * T(m.head_dim);
  T block = c * (q + 2 * kv) + q * c + 2 * c;
  if (m.qkv_bias) block += q + 2 * kv;
  if (m.qk_norm) block += 2 * T(m.head_dim);
  const T sparse = T(m.sparse_layers()), experts = T(m.moe.num_experts);
  const T mlps = (T(m.num_layers) - sparse) * 3 * c * T(m.intermediate_size) +
                 sparse * (experts * c + experts * 3 * c * T(m.moe.intermediate));
  T n = T(m.vocab_size) * c + T(m.num_layers) * block + mlps + c;
  if (!m.tie_word_embeddings) n += T(m.vocab_size) * c;
  return n;
}

// What a setting of type T must be in JSON, for the refusal of one that is not.
template <class T>
const char* json_kind() {
  if constexpr (std::is_same_v<T, std::string>) return "a string";
  else if constexpr (std::is_same_v<T, bool>) return "true or false";
  else if constexpr (std::is_integral_v<T>) return "an integer";
  else return "a number";
}

template <class T>
bool has_kind(const Json& v) {
  if constexpr (std::is_same_v<T, std::string>) return v.is_string();
  else if constexpr (std::is_same_v<T, bool>) return v.is_boolean();
  else if constexpr (std::is_integral_v<T>) return v.is_number_integer();
  else return v.is_number();
}

// j[key] as T, or fallback where it is absent or null; a value of another kind is refused
// naming the key (a config.json is the user's file: nlohmann's type errors name nothing).
template <class T>
T get_or(const std::string& source, const Json& j, const char* key, T fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  ANVIL_ENSURE(has_kind<T>(*it), kInvalidInput, source, ": \"", key, "\" must be ", json_kind<T>(), ", got ",
               it->dump());
  return it->get<T>();
}

int64_t require_int(const Json& j, const char* key, const std::string& source) {
  auto it = j.find(key);
  ANVIL_ENSURE(it != j.end() && it->is_number_integer(), kInvalidInput, source, ": missing or non-integer \"",
               key, "\"");
  int64_t v = it->get<int64_t>();
  ANVIL_ENSURE(v > 0, kInvalidInput, source, ": \"", key, "\" must be positive, got ", v);
  return v;
}

// transformers' get_mscale of _compute_yarn_parameters.
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// yarn's parameters as transformers' standardize_rope_params and _compute_yarn_parameters
// read them: original_max_position_embeddings from the top level first (Phi3's), then the
// scaling's, then max_position_embeddings; factor, when null, their ratio; attention_factor,
// when absent, from factor, mscale and mscale_all_dim; beta_fast and beta_slow 32 and 1
// where absent or zero.
void read_yarn(const Json& j, const Json& scaling, const std::string& source, RopeConfig* rope) {
  const int64_t max_pos = get_or<int64_t>(source, j, "max_position_embeddings", 0);
  rope->original_max_position_embeddings =
      get_or<int64_t>(source, j, "original_max_position_embeddings",
                      get_or<int64_t>(source, scaling, "original_max_position_embeddings", max_pos));
  ANVIL_ENSURE(rope->original_max_position_embeddings > 0, kInvalidInput, source,
               ": yarn RoPE needs original_max_position_embeddings (or max_position_embeddings)");
  const double ratio = static_cast<double>(max_pos) / static_cast<double>(rope->original_max_position_embeddings);
  rope->factor = get_or<double>(source, scaling, "factor", ratio);
  ANVIL_ENSURE(rope->factor > 0, kInvalidInput, source, ": yarn RoPE needs factor > 0, got ", rope->factor);
  const double mscale = get_or<double>(source, scaling, "mscale", 0);
  const double mscale_all_dim = get_or<double>(source, scaling, "mscale_all_dim", 0);
  const double inferred = mscale != 0 && mscale_all_dim != 0
                              ? yarn_mscale(rope->factor, mscale) / yarn_mscale(rope->factor, mscale_all_dim)
                              : yarn_mscale(rope->factor, 1.0);
  rope->attention_factor = get_or<double>(source, scaling, "attention_factor", inferred);
  const double beta_fast = get_or<double>(source, scaling, "beta_fast", 0), beta_slow = get_or<double>(source, scaling, "beta_slow", 0);
  rope->beta_fast = beta_fast != 0 ? beta_fast : 32.0;
  rope->beta_slow = beta_slow != 0 ? beta_slow : 1.0;
  rope->truncate = get_or<bool>(source, scaling, "truncate", true);
}

void read_rope(const Json& j, const std::string& source, RopeConfig* rope) {
  // transformers 5: rope_parameters {rope_type, rope_theta, ...}; transformers 4: top-level
  // rope_theta and an optional rope_scaling {type|rope_type, factor, ...}.
  const Json* params = nullptr;
  if (auto it = j.find("rope_parameters"); it != j.end() && it->is_object()) params = &*it;
  double theta = get_or<double>(source, j, "rope_theta", 10000.0);
  const Json* scaling = nullptr;
  if (params) {
    theta = get_or<double>(source, *params, "rope_theta", theta);
    scaling = params;
  } else if (auto it = j.find("rope_scaling"); it != j.end() && it->is_object()) {
    scaling = &*it;
  }
  rope->theta = theta;
  if (!scaling) return;
  std::string type = get_or<std::string>(source, *scaling, "rope_type", get_or<std::string>(source, *scaling, "type", "default"));
  const double partial =
      get_or<double>(source, *scaling, "partial_rotary_factor", get_or<double>(source, j, "partial_rotary_factor", 1.0));
  ANVIL_ENSURE(partial == 1.0, kUnsupported, source, ": partial_rotary_factor ", partial,
               " is not supported (RoPE over the whole head only)");
  if (type == "default") return;
  ANVIL_ENSURE(type == "llama3" || type == "yarn", kUnsupported, source, ": RoPE scaling \"", type,
               "\" is not supported (supported: default, llama3, yarn)");
  rope->type = type;
  if (type == "yarn") return read_yarn(j, *scaling, source, rope);
  rope->factor = get_or<double>(source, *scaling, "factor", 8.0);
  rope->low_freq_factor = get_or<double>(source, *scaling, "low_freq_factor", 1.0);
  rope->high_freq_factor = get_or<double>(source, *scaling, "high_freq_factor", 4.0);
  rope->original_max_position_embeddings =
      get_or<int64_t>(source, *scaling, "original_max_position_embeddings", 8192);
  ANVIL_ENSURE(rope->high_freq_factor > rope->low_freq_factor && rope->factor > 0, kInvalidInput, source,
               ": llama3 RoPE needs high_freq_factor > low_freq_factor and factor > 0");
}

// The architecture, from "architectures" or else "model_type": the one block's variant.
void read_architecture(const Json& j, const std::string& source, ModelConfig& c) {
  std::string arch;
  if (auto it = j.find("architectures"); it != j.end() && it->is_array() && !it->empty()) {
    ANVIL_ENSURE((*it)[0].is_string(), kInvalidInput, source, ": \"architectures\" must list class names, got ",
                 it->dump());
    arch = (*it)[0].get<std::string>();
  }
  if (arch.empty()) {
    if (c.model_type == "qwen3") arch = "Qwen3ForCausalLM";
    else if (c.model_type == "qwen3_moe") arch = "Qwen3MoeForCausalLM";
    else if (c.model_type == "qwen2") arch = "Qwen2ForCausalLM";
    else if (c.model_type == "llama") arch = "LlamaForCausalLM";
  }
  c.architecture = arch;
  if (arch == "Qwen3ForCausalLM") {
    c.arch = Arch::kQwen3;
    c.qk_norm = true;
  } else if (arch == "Qwen2ForCausalLM") {
    c.arch = Arch::kQwen2;
    c.qkv_bias = true;
  } else if (arch == "LlamaForCausalLM") {
    c.arch = Arch::kLlama;
  } else if (arch == "Qwen3MoeForCausalLM") {
    c.arch = Arch::kQwen3Moe;
    c.qk_norm = true;
  } else {
    raise(ErrorKind::kUnsupported, source, ": architecture \"", arch.empty() ? c.model_type : arch,
          "\" is not supported (supported: Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM, "
          "Qwen3MoeForCausalLM)");
  }
}

// A config that names anything this block does not compute is refused, with the setting.
void refuse_unsupported(const Json& j, const std::string& source, const ModelConfig& c) {
  for (const char* moe : {"num_experts", "num_local_experts", "n_routed_experts"}) {
    if (c.arch == Arch::kQwen3Moe && std::string(moe) != "n_routed_experts") continue;  // read_moe's
    int64_t experts = get_or<int64_t>(source, j, moe, 0);
    ANVIL_ENSURE(experts == 0, kUnsupported, source, ": mixture of experts (\"", moe, "\": ", experts,
                 ") is not supported for ", c.architecture, " (only Qwen3MoeForCausalLM's)");
  }
  ANVIL_ENSURE(!get_or<bool>(source, j, "use_sliding_window", false), kUnsupported, source,
               ": sliding-window attention (\"use_sliding_window\": true) is not supported");
  if (auto it = j.find("layer_types"); it != j.end() && it->is_array())
    for (auto& t : *it)
      ANVIL_ENSURE(t == "full_attention", kUnsupported, source, ": layer type ", t.dump(),
                   " is not supported (only full_attention)");
  std::string act = get_or<std::string>(source, j, "hidden_act", "silu");
  ANVIL_ENSURE(act == "silu", kUnsupported, source, ": activation \"", act, "\" is not supported (only silu)");
  if (c.arch != Arch::kQwen2)
    ANVIL_ENSURE(!get_or<bool>(source, j, "attention_bias", false), kUnsupported, source,
                 ": \"attention_bias\": true is not supported for ", c.architecture);
  ANVIL_ENSURE(!get_or<bool>(source, j, "mlp_bias", false), kUnsupported, source, ": \"mlp_bias\": true is not supported");
  ANVIL_ENSURE(get_or<int64_t>(source, j, "pretraining_tp", 1) == 1, kUnsupported, source,
               ": \"pretraining_tp\" other than 1 is not supported");
}

// Qwen3-MoE's experts, with Qwen3MoeConfig's defaults; num_hidden_layers read first.
void read_moe(const Json& j, const std::string& source, ModelConfig& c) {
  MoeConfig& m = c.moe;
  // The hub's config.json says num_experts; transformers 5 writes num_local_experts (its
  // attribute_map's name for it).
  m.num_experts = get_or<int64_t>(source, j, "num_experts", get_or<int64_t>(source, j, "num_local_experts", 128));
  m.top_k = get_or<int64_t>(source, j, "num_experts_per_tok", 8);
  m.intermediate = get_or<int64_t>(source, j, "moe_intermediate_size", 768);
  m.norm_topk_prob = get_or<bool>(source, j, "norm_topk_prob", false);
  m.sparse_step = get_or<int64_t>(source, j, "decoder_sparse_step", 1);
  m.router_aux_loss_coef = get_or<double>(source, j, "router_aux_loss_coef", 0.001);
  m.output_router_logits = get_or<bool>(source, j, "output_router_logits", false);
  ANVIL_ENSURE(m.num_experts >= 1 && m.intermediate >= 1, kInvalidInput, source,
               ": \"num_experts\" and \"moe_intermediate_size\" must be positive, got ", m.num_experts, " and ",
               m.intermediate);
  ANVIL_ENSURE(m.top_k >= 1 && m.top_k <= m.num_experts, kInvalidInput, source, ": \"num_experts_per_tok\" ",
               m.top_k, " must be between 1 and num_experts (", m.num_experts, ")");
  ANVIL_ENSURE(m.sparse_step >= 1, kInvalidInput, source, ": \"decoder_sparse_step\" must be positive, got ",
               m.sparse_step);
  m.mlp_only_layers.clear();
  if (auto it = j.find("mlp_only_layers"); it != j.end() && !it->is_null()) {
    ANVIL_ENSURE(it->is_array(), kInvalidInput, source, ": \"mlp_only_layers\" must list layer indices, got ",
                 it->dump());
    for (const Json& l : *it) {
      ANVIL_ENSURE(l.is_number_integer() && l.get<int64_t>() >= 0 && l.get<int64_t>() < c.num_layers,
                   kInvalidInput, source, ": \"mlp_only_layers\" entry ", l.dump(), " is not a layer (0..",
                   c.num_layers - 1, ")");
      m.mlp_only_layers.push_back(l.get<int64_t>());
    }
  }
}

// The sizes, and the numerics with transformers' defaults.
void read_sizes(const Json& j, const std::string& source, ModelConfig& c) {
  c.vocab_size = require_int(j, "vocab_size", source);
  c.hidden_size = require_int(j, "hidden_size", source);
  c.intermediate_size = require_int(j, "intermediate_size", source);
  c.num_layers = require_int(j, "num_hidden_layers", source);
  c.num_heads = require_int(j, "num_attention_heads", source);
  c.num_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                       ? require_int(j, "num_key_value_heads", source)
                       : c.num_heads;
  ANVIL_ENSURE(c.num_heads % c.num_kv_heads == 0, kInvalidInput, source, ": num_attention_heads ",
               c.num_heads, " is not a multiple of num_key_value_heads ", c.num_kv_heads);
  if (j.contains("head_dim") && !j["head_dim"].is_null()) {
    c.head_dim = require_int(j, "head_dim", source);
  } else {
    ANVIL_ENSURE(c.hidden_size % c.num_heads == 0, kInvalidInput, source, ": hidden_size ", c.hidden_size,
                 " is not a multiple of num_attention_heads ", c.num_heads, " and head_dim is not given");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  ANVIL_ENSURE(c.head_dim % 2 == 0, kInvalidInput, source, ": head_dim ", c.head_dim, " must be even for RoPE");
  c.max_position_embeddings = get_or<int64_t>(source, j, "max_position_embeddings", 4096);
  c.rms_norm_eps = get_or<double>(source, j, "rms_norm_eps", 1e-6);
  c.initializer_range = get_or<double>(source, j, "initializer_range", 0.02);
  c.tie_word_embeddings = get_or<bool>(source, j, "tie_word_embeddings", false);
  if (c.arch == Arch::kQwen3Moe) read_moe(j, source, c);
  // Sizes no machine holds are refused before anything is sized by them (the parameter
  // table, RoPE's table) and before int64 arithmetic on them could overflow.
  ANVIL_ENSURE(c.num_layers <= kMaxLayers, kUnsupported, source, ": num_hidden_layers ", c.num_layers,
               " is more than anvil builds (", kMaxLayers, ")");
  const double params = count_parameters<double>(c);
  ANVIL_ENSURE(params <= kMaxParameters, kUnsupported, source, ": these sizes make a model of ", params,
               " parameters, more than anvil builds (2^44)");
}

}  // namespace

int64_t ModelConfig::num_parameters() const { return count_parameters<int64_t>(*this); }

bool ModelConfig::sparse_layer(int64_t l) const {
  if (moe.num_experts == 0) return false;
  for (int64_t d : moe.mlp_only_layers)
    if (d == l) return false;
  return (l + 1) % moe.sparse_step == 0;
}

int64_t ModelConfig::sparse_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < num_layers; ++l) n += sparse_layer(l) ? 1 : 0;
  return n;
}

int64_t ModelConfig::sparse_index(int64_t l) const {
  ANVIL_ASSERT(sparse_layer(l));
  int64_t n = 0;
  for (int64_t k = 0; k < l; ++k) n += sparse_layer(k) ? 1 : 0;
  return n;
}

ModelConfig config_from_json(const Json& j, const std::string& source) {
  ANVIL_ENSURE(j.is_object(), kInvalidInput, source, ": expected a JSON object");
  ModelConfig c;
  c.raw = j;
  c.model_type = get_or<std::string>(source, j, "model_type", "");
  read_architecture(j, source, c);
  refuse_unsupported(j, source, c);
  read_sizes(j, source, c);
  read_rope(j, source, &c.rope);
  return c;
}

ModelConfig load_config(const std::string& model_dir) {
  const std::string path = path_join(model_dir, "config.json");
  ANVIL_ENSURE(path_exists(path), kNotFound, model_dir, ": no config.json (is this a Hugging Face model folder?)");
  return config_from_json(json_read_file(path), path);
}

Json config_to_json(const ModelConfig& c) {
  Json j;
  j["architectures"] = Json::array({c.architecture});
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["initializer_range"] = c.initializer_range;
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  j["attention_bias"] = c.qkv_bias;
  j["use_cache"] = false;
  j["dtype"] = "float32";
  Json rope = {{"rope_type", c.rope.type}, {"rope_theta", c.rope.theta}};
  if (c.rope.type == "yarn") {
    rope["factor"] = c.rope.factor;
    rope["original_max_position_embeddings"] = c.rope.original_max_position_embeddings;
    rope["beta_fast"] = c.rope.beta_fast;
    rope["beta_slow"] = c.rope.beta_slow;
    rope["attention_factor"] = c.rope.attention_factor;
    rope["truncate"] = c.rope.truncate;
  }
  if (c.rope.type == "llama3") {
    rope["factor"] = c.rope.factor;
    rope["low_freq_factor"] = c.rope.low_freq_factor;
    rope["high_freq_factor"] = c.rope.high_freq_factor;
    rope["original_max_position_embeddings"] = c.rope.original_max_position_embeddings;
  }
  j["rope_parameters"] = rope;
  if (c.arch != Arch::kLlama) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
  }
  if (c.arch == Arch::kQwen3Moe) {
    const MoeConfig& m = c.moe;
    j["num_experts"] = m.num_experts;
    j["num_experts_per_tok"] = m.top_k;
    j["moe_intermediate_size"] = m.intermediate;
    j["norm_topk_prob"] = m.norm_topk_prob;
    j["decoder_sparse_step"] = m.sparse_step;
    j["mlp_only_layers"] = m.mlp_only_layers;
    j["router_aux_loss_coef"] = m.router_aux_loss_coef;
    j["output_router_logits"] = m.output_router_logits;
  }
  return j;
}

std::vector<std::string> preset_names() {
  return {"tiny",     "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b",       "qwen3-8b",
          "qwen3-14b", "qwen3-32b",  "qwen3-30b-a3b", "qwen3-235b-a22b"};
}

ModelConfig preset_config(const std::string& name, int64_t num_layers) {
  struct Preset {
    const char* name;
    int64_t vocab, hidden, inter, layers, heads, kv, head_dim;
    bool tie;
    int64_t max_pos;
    int64_t experts = 0, top_k = 0, moe_inter = 0;  // the MoE models' (config.json on the hub)
  };
  // Shapes of the published Qwen3 models; "tiny" is the tests' size: a Qwen3 block small
  // enough to train on a CPU in a minute, with the vocabulary of the demo's byte-level
  // tokenizer (data/demo, 274 tokens) rounded up to 320 (the demo's model is tiny at width 64:
  // data/demo/model_config.json).
  static const Preset kPresets[] = {
      {"tiny", 320, 128, 384, 4, 4, 2, 32, true, 4096},
      {"qwen3-0.6b", 151936, 1024, 3072, 28, 16, 8, 128, true, 40960},
      {"qwen3-1.7b", 151936, 2048, 6144, 28, 16, 8, 128, true, 40960},
      {"qwen3-4b", 151936, 2560, 9728, 36, 32, 8, 128, true, 40960},
      {"qwen3-8b", 151936, 4096, 12288, 36, 32, 8, 128, false, 40960},
      {"qwen3-14b", 151936, 5120, 17408, 40, 40, 8, 128, false, 40960},
      {"qwen3-32b", 151936, 5120, 25600, 64, 64, 8, 128, false, 40960},
      {"qwen3-30b-a3b", 151936, 2048, 6144, 48, 32, 4, 128, false, 40960, 128, 8, 768},
      {"qwen3-235b-a22b", 151936, 4096, 12288, 94, 64, 4, 128, false, 40960, 128, 8, 1536},
  };
  for (const Preset& p : kPresets) {
    if (name != p.name) continue;
    ANVIL_ENSURE(num_layers >= 0 && num_layers <= p.layers, kUsage, "--num-layers ", num_layers, ": preset ", name,
                 " has ", p.layers, " layers (give 1 to ", p.layers, ", or 0 for all)");
    ModelConfig c;
    c.arch = p.experts ? Arch::kQwen3Moe : Arch::kQwen3;
    c.architecture = p.experts ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM";
    c.model_type = p.experts ? "qwen3_moe" : "qwen3";
    c.qk_norm = true;
    c.vocab_size = p.vocab;
    c.hidden_size = p.hidden;
    c.intermediate_size = p.inter;
    c.num_layers = num_layers > 0 ? num_layers : p.layers;
    if (p.experts) {
      c.moe.num_experts = p.experts;
      c.moe.top_k = p.top_k;
      c.moe.intermediate = p.moe_inter;
      c.moe.norm_topk_prob = true;
    }
    c.num_heads = p.heads;
    c.num_kv_heads = p.kv;
    c.head_dim = p.head_dim;
    c.tie_word_embeddings = p.tie;
    c.max_position_embeddings = p.max_pos;
    c.rms_norm_eps = 1e-6;
    c.rope.theta = 1000000.0;
    c.raw = config_to_json(c);
    return c;
  }
  std::string names;
  for (auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  raise(ErrorKind::kUsage, "unknown preset '", name, "' (presets: ", names, ")");
}

namespace {

// transformers' find_correction_dim: the dimension at which a frequency turns num_rotations
// times over the original context.
double yarn_correction_dim(double num_rotations, double dim, double base, double max_pos) {
  return (dim * std::log(max_pos / (num_rotations * 2 * M_PI))) / (2 * std::log(base));
}

// _compute_yarn_parameters' inverse frequencies from the unscaled ones (1 / pos_freqs, the
// same fp32 values): interpolated (divided by factor) below the correction range,
// extrapolated (unchanged) above it, a linear ramp between; fp32 where transformers' tensors
// are, double where its Python floats are.
std::vector<float> yarn_inv_freq(const ModelConfig& c, const std::vector<float>& extrapolation) {
  const RopeConfig& r = c.rope;
  const double dim = static_cast<double>(c.head_dim), max_pos = static_cast<double>(r.original_max_position_embeddings);
  double low = yarn_correction_dim(r.beta_fast, dim, r.theta, max_pos);
  double high = yarn_correction_dim(r.beta_slow, dim, r.theta, max_pos);
  if (r.truncate) low = std::floor(low), high = std::ceil(high);
  low = std::max(low, 0.0);
  high = std::min(high, dim - 1);
  if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
  const float lo = static_cast<float>(low), width = static_cast<float>(high - low);
  const float factor = static_cast<float>(r.factor);
  const float base = static_cast<float>(r.theta);
  std::vector<float> inv(extrapolation.size());
  for (size_t i = 0; i < inv.size(); ++i) {
    const float pos_freq = std::pow(base, static_cast<float>(2 * i) / static_cast<float>(c.head_dim));
    const float interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::min(std::max((static_cast<float>(i) - lo) / width, 0.0f), 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation[i] * extrapolation_factor;
  }
  return inv;
}

}  // namespace

void rope_row(const ModelConfig& c, const std::vector<float>& inv, int64_t position, float* cos, float* sin) {
  const float scaling = c.rope.type == "yarn" ? static_cast<float>(c.rope.attention_factor) : 1.0f;
  for (size_t i = 0; i < inv.size(); ++i) {
    const float angle = inv[i] * static_cast<float>(position);
    cos[i] = std::cos(angle) * scaling;
    sin[i] = std::sin(angle) * scaling;
  }
}

std::vector<float> rope_inv_freq(const ModelConfig& c) {
  const int64_t half = c.head_dim / 2;
  std::vector<float> inv(static_cast<size_t>(half));
  const float base = static_cast<float>(c.rope.theta);
  for (int64_t i = 0; i < half; ++i) {
    const float e = static_cast<float>(2 * i) / static_cast<float>(c.head_dim);
    inv[static_cast<size_t>(i)] = 1.0f / std::pow(base, e);
  }
  if (c.rope.type == "yarn") return yarn_inv_freq(c, inv);
  if (c.rope.type != "llama3") return inv;
  const float factor = static_cast<float>(c.rope.factor);
  const float low = static_cast<float>(c.rope.low_freq_factor);
  const float high = static_cast<float>(c.rope.high_freq_factor);
  const float old_ctx = static_cast<float>(c.rope.original_max_position_embeddings);
  const float low_freq_wavelen = old_ctx / low;
  const float high_freq_wavelen = old_ctx / high;
  const float two_pi = static_cast<float>(2.0 * M_PI);
  for (auto& f : inv) {
    const float wavelen = two_pi / f;
    float scaled = wavelen > low_freq_wavelen ? f / factor : f;
    const bool medium = !(wavelen < high_freq_wavelen) && !(wavelen > low_freq_wavelen);
    if (medium) {
      const float smooth = (old_ctx / wavelen - low) / (high - low);
      scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
    }
    f = scaled;
  }
  return inv;
}

}  // namespace anvil
