// export_hf_folder: config, sharded weights, index, generation config and tokenizer files (see hf_export.h).
#include "io/hf_export.h"

#include <cstdio>
#include <filesystem>
#include <optional>

#include "core/bf16.h"
#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/units.h"
#include "io/safetensors.h"

namespace anvil {
namespace {

// Removes the weights of an earlier export so that no stale shard or index is left beside the new ones.
void remove_old_weights(const std::string& out_dir) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(out_dir, ec)) {
    const std::string n = entry.path().filename().string();
    if (n == "model.safetensors" || n == "model.safetensors.index.json" ||
        (n.rfind("model-", 0) == 0 && n.size() > 12 && n.compare(n.size() - 12, 12, ".safetensors") == 0))
      std::filesystem::remove(entry.path(), ec);
  }
}

// Shards of consecutive tensors up to max_shard_bytes each (a larger tensor alone); *total: all their bytes.
std::vector<std::vector<const HfTensor*>> plan_shards(const std::vector<HfTensor>& tensors, size_t esize,
                                                      int64_t max_shard_bytes, int64_t* total) {
  std::vector<std::vector<const HfTensor*>> shards(1);
  int64_t in_shard = 0;
  *total = 0;
  for (const HfTensor& t : tensors) {
    const int64_t bytes = t.shape.numel() * static_cast<int64_t>(esize);
    if (!shards.back().empty() && in_shard + bytes > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(&t);
    in_shard += bytes;
    *total += bytes;
  }
  return shards;
}

// Writes one shard file (bf16 values rounded from fp32 here) and records its tensors in weight_map.
void write_weight_file(const std::string& path, const std::vector<const HfTensor*>& shard, DType dtype,
                       const std::string& file, Json& weight_map) {
  std::vector<std::vector<uint16_t>> bf16;
  SafetensorsWriter w;
  w.set_metadata("format", "pt");
  for (const HfTensor* t : shard) {
    if (dtype == DType::kF32) {
      w.add(t->name, dtype, t->shape, t->data);
    } else {
      const int64_t n = t->shape.numel();
      bf16.emplace_back(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) bf16.back()[static_cast<size_t>(i)] = f32_to_bf16_bits(t->data[i]);
      w.add(t->name, dtype, t->shape, bf16.back().data());
    }
    weight_map[t->name] = file;
  }
  w.write(path);
}

// The first source folder that holds `file`, or "".
std::string first_with(const std::vector<std::string>& dirs, const std::string& file) {
  for (const std::string& d : dirs)
    if (!d.empty() && path_exists(path_join(d, file))) return d;
  return "";
}

void copy_if_present(const std::vector<std::string>& dirs, const std::string& file, const std::string& out_dir) {
  const std::string d = first_with(dirs, file);
  if (!d.empty()) write_file_atomic(path_join(out_dir, file), read_file(path_join(d, file)));
}

bool has_eos(const Json& j) { return j.contains("eos_token_id") && !j["eos_token_id"].is_null(); }

// config, with eos_token_id from the exported tokenizer's eos_token when the model's config has none.
Json with_eos_id(const Json& config, const std::vector<std::string>& source_dirs) {
  Json j = config;
  if (has_eos(j)) return j;
  const std::string dir = first_with(source_dirs, "tokenizer_config.json");
  if (dir.empty()) return j;
  if (const std::optional<int64_t> id = tokenizer_eos_id(dir)) j["eos_token_id"] = *id;
  return j;
}

// generation_config.json from the first source folder that has one (eos_token_id added from
// config when it has none), else made from config's token ids.
void write_generation_config(const std::vector<std::string>& source_dirs, const Json& config,
                             const std::string& out_dir) {
  const std::string dir = first_with(source_dirs, "generation_config.json");
  const std::string out = path_join(out_dir, "generation_config.json");
  if (!dir.empty()) {
    const std::string path = path_join(dir, "generation_config.json");
    const std::string text = read_file(path);
    Json g = has_eos(config) ? json_parse(text, path) : Json::object();
    if (!has_eos(config) || has_eos(g)) {
      write_file_atomic(out, text);
      return;
    }
    g["eos_token_id"] = config["eos_token_id"];
    json_write_file(out, g);
    return;
  }
  Json g = {{"_from_model_config", true}};
  for (const char* k : {"bos_token_id", "eos_token_id", "pad_token_id"})
    if (config.contains(k) && !config[k].is_null()) g[k] = config[k];
  json_write_file(out, g);
}

// A special token in tokenizer_config.json: a string or an AddedToken object {"content": ...}.
std::string token_content(const Json& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

// The id of token text `content` among tokenizer.json's added tokens, else in its vocabulary.
std::optional<int64_t> tokenizer_json_id(const std::string& path, const std::string& content) {
  if (!path_exists(path)) return std::nullopt;
  const Json tok = json_read_file(path);
  if (tok.contains("added_tokens") && tok["added_tokens"].is_array())
    for (const Json& t : tok["added_tokens"])
      if (token_content(t) == content && t.contains("id")) return t["id"].get<int64_t>();
  if (!tok.contains("model") || !tok["model"].contains("vocab")) return std::nullopt;
  const Json& vocab = tok["model"]["vocab"];
  if (vocab.is_object() && vocab.contains(content)) return vocab[content].get<int64_t>();
  return std::nullopt;
}

}  // namespace

std::optional<int64_t> tokenizer_eos_id(const std::string& dir) {
  const std::string path = path_join(dir, "tokenizer_config.json");
  if (dir.empty() || !path_exists(path)) return std::nullopt;
  const Json config = json_read_file(path);
  const std::string eos = token_content(config.value("eos_token", Json()));
  if (eos.empty()) return std::nullopt;
  if (config.contains("added_tokens_decoder") && config["added_tokens_decoder"].is_object())
    for (const auto& [id, t] : config["added_tokens_decoder"].items())
      if (token_content(t) == eos) return std::stoll(id);
  return tokenizer_json_id(path_join(dir, "tokenizer.json"), eos);
}

void export_hf_folder(const Json& config, const std::vector<HfTensor>& tensors, const HfExportSettings& s) {
  ANVIL_ENSURE(s.dtype == DType::kF32 || s.dtype == DType::kBF16, kUnsupported, "export dtype ", dtype_name(s.dtype));
  make_directories(s.out_dir);
  remove_old_weights(s.out_dir);
  Json j = with_eos_id(config, s.source_dirs);
  j["dtype"] = s.dtype == DType::kF32 ? "float32" : "bfloat16";
  json_write_file(path_join(s.out_dir, "config.json"), j);

  int64_t total = 0;
  const auto shards = plan_shards(tensors, dtype_size(s.dtype), s.max_shard_bytes, &total);
  Json weight_map = Json::object();
  for (size_t k = 0; k < shards.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, shards.size());
    const std::string file = shards.size() == 1 ? "model.safetensors" : name;
    write_weight_file(path_join(s.out_dir, file), shards[k], s.dtype, file, weight_map);
  }
  if (shards.size() > 1)
    json_write_file(path_join(s.out_dir, "model.safetensors.index.json"),
                    {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});

  write_generation_config(s.source_dirs, j, s.out_dir);
  for (const char* f : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.json",
                        "merges.txt", "chat_template.jinja"})
    copy_if_present(s.source_dirs, f, s.out_dir);
  if (!s.config_toml.empty()) write_file_atomic(path_join(s.out_dir, "anvil_config.toml"), s.config_toml);
  log_result("exported ", s.out_dir, " (", s.dtype == DType::kF32 ? "fp32" : "bf16", ", ", shards.size(),
           shards.size() == 1 ? " file" : " shards", ", ", format_bytes(static_cast<double>(total)), ")");
}

}  // namespace anvil
