// ChatTemplate: loading from a tokenizer folder and transformers' rendering conventions.
#include "data/chat_template.h"

#include "core/error.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/json.h"

namespace anvil {

namespace {

// A special token in tokenizer_config.json is a string or an AddedToken object {"content": ...}.
std::string token_text(const OrderedJson& j) {
  if (j.is_string()) return j.get<std::string>();
  if (j.is_object() && j.contains("content") && j["content"].is_string()) return j["content"].get<std::string>();
  return "";
}

}  // namespace

OrderedJson read_tokenizer_config(const std::string& dir) {
  const std::string config_path = path_join(dir, "tokenizer_config.json");
  if (!path_exists(config_path)) return OrderedJson::object();
  const std::string text = read_file(config_path);
  check_json_depth(text, config_path);
  try {
    return OrderedJson::parse(text);
  } catch (const nlohmann::json::exception& e) {
    raise(ErrorKind::kInvalidInput, config_path, ": ", e.what());
  }
}

std::string special_token_text(const OrderedJson& config, const char* key) {
  return config.contains(key) ? token_text(config[key]) : std::string();
}

ChatTemplate ChatTemplate::load(const std::string& dir) {
  const std::string config_path = path_join(dir, "tokenizer_config.json");
  const std::string jinja_path = path_join(dir, "chat_template.jinja");
  const OrderedJson config = read_tokenizer_config(dir);
  std::string source;
  if (path_exists(jinja_path)) {
    source = read_file(jinja_path);
  } else if (config.contains("chat_template")) {
    const OrderedJson& t = config["chat_template"];
    if (t.is_string()) {
      source = t.get<std::string>();
    } else if (t.is_array()) {
      for (const auto& named : t)
        if (named.value("name", "") == "default") source = named.value("template", "");
      ANVIL_ENSURE(!source.empty(), kInvalidInput, config_path, ": chat_template list has no template named 'default'");
    }
  }
  ANVIL_ENSURE(!source.empty(), kNotFound, dir,
               ": no chat template (neither chat_template.jinja nor a chat_template in tokenizer_config.json)");
  jinja::Dict special;
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"}) {
    const std::string text = special_token_text(config, key);
    if (!text.empty()) special.emplace_back(key, jinja::Value(text));
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    jinja::List extra;
    for (const auto& t : config["additional_special_tokens"]) extra.emplace_back(token_text(t));
    special.emplace_back("additional_special_tokens", jinja::Value(std::move(extra)));
  }
  return ChatTemplate(source, std::move(special), special_token_text(config, "eos_token"));
}

ChatTemplate::ChatTemplate(const std::string& source, jinja::Dict special_tokens, std::string eos_token)
    : source_(source),
      template_(source, "chat_template"),
      special_tokens_(std::move(special_tokens)),
      eos_token_(std::move(eos_token)) {
  Xxh64 h;
  h.update(source_);
  for (const auto& [k, v] : special_tokens_) {
    h.update(k);
    h.update("=");
    h.update(jinja::to_output(v));
    h.update("\n");
  }
  hash_ = h.hex();
}

std::string ChatTemplate::render(const OrderedJson& messages, bool add_generation_prompt, const OrderedJson& extra) const {
  ANVIL_ENSURE(messages.is_array(), kInvalidInput, "chat messages must be a JSON array");
  jinja::Dict vars = special_tokens_;
  vars.emplace_back("messages", jinja::Value::from_json(messages));
  vars.emplace_back("tools", jinja::Value::none());
  vars.emplace_back("documents", jinja::Value::none());
  vars.emplace_back("add_generation_prompt", jinja::Value(add_generation_prompt));
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it)
      jinja::dict_set(vars, it.key(), jinja::Value::from_json(it.value()));
  return template_.render(vars);
}

std::vector<std::pair<size_t, size_t>> ChatTemplate::assistant_spans(const OrderedJson& messages,
                                                                     const std::string& rendered) const {
  std::vector<std::pair<size_t, size_t>> spans;
  for (size_t i = 0; i < messages.size(); ++i) {
    const OrderedJson& m = messages[i];
    if (!m.is_object() || m.value("role", "") != "assistant") continue;
    OrderedJson before = OrderedJson::array();
    for (size_t k = 0; k < i; ++k) before.push_back(messages[k]);
    const std::string prompt = render(before, /*add_generation_prompt=*/true);
    ANVIL_ENSURE(rendered.compare(0, prompt.size(), prompt) == 0 && rendered.size() >= prompt.size(), kInvalidInput,
                 "assistant-only loss: the chat template's generation prompt before message ", i,
                 " is not a prefix of the full rendering, so turn boundaries cannot be found");
    const size_t begin = prompt.size();
    size_t end = rendered.size();
    if (!eos_token_.empty()) {
      const size_t eos = rendered.find(eos_token_, begin);
      if (eos != std::string::npos) end = eos + eos_token_.size();
    }
    spans.emplace_back(begin, end);
  }
  return spans;
}

}  // namespace anvil
