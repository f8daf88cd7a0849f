// A model's chat template, rendered as transformers' apply_chat_template renders it.
//
// The template comes from the tokenizer folder: chat_template.jinja when present, else
// tokenizer_config.json's "chat_template" (a string, or a list of {name, template} where the
// one named "default" is used). The variables a template sees are those transformers passes:
// messages, tools (None), documents (None), add_generation_prompt, the special tokens that
// are set (bos_token, eos_token, pad_token, unk_token, additional_special_tokens) and any
// extra keyword arguments. Messages keep their JSON key order (tojson prints it).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "data/jinja/jinja.h"

namespace anvil {

using OrderedJson = nlohmann::ordered_json;

// A tokenizer folder's tokenizer_config.json ({} when it has none; kInvalidInput when malformed).
OrderedJson read_tokenizer_config(const std::string& dir);
// The text of the special token `key` ("eos_token", ...) in it: a string or an AddedToken object
// {"content": ...}; "" when absent.
std::string special_token_text(const OrderedJson& config, const char* key);

class ChatTemplate {
 public:
  // dir: a tokenizer or model folder.
  static ChatTemplate load(const std::string& dir);
  // source: the Jinja text; special_tokens: variables such as bos_token / eos_token.
  ChatTemplate(const std::string& source, jinja::Dict special_tokens, std::string eos_token);

  // messages: a JSON array of {"role": ..., "content": ...}. extra: more template variables
  // (an object), e.g. {"enable_thinking": false}.
  std::string render(const OrderedJson& messages, bool add_generation_prompt,
                     const OrderedJson& extra = OrderedJson::object()) const;

  // Byte ranges [begin, end) of `rendered` (the full rendering of messages) that hold the
  // assistant turns: each begins where the rendering of the messages before it with
  // add_generation_prompt=True ends, and ends after the first eos_token that follows (or at
  // the end). Throws kInvalidInput when a generation prompt is not a prefix of the rendering
  // (the template then cannot mark turns this way).
  std::vector<std::pair<size_t, size_t>> assistant_spans(const OrderedJson& messages,
                                                          const std::string& rendered) const;

  const std::string& source() const { return source_; }
  const std::string& eos_token() const { return eos_token_; }
  // Content hash of the template and its special tokens (cache keys).
  const std::string& hash() const { return hash_; }

 private:
  std::string source_;
  jinja::Template template_;
  jinja::Dict special_tokens_;
  std::string eos_token_;
  std::string hash_;
};

}  // namespace anvil
