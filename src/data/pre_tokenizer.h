// The pre-tokenizer of tokenizer.json: cuts normalized text into the words BPE encodes.
//
// Steps, applied in order to every piece the previous one made: Split (the file's own regex or
// a literal string; each of the reference's behaviors; invert) and ByteLevel (add_prefix_space;
// GPT-2's regex when use_regex). The Split regex is Oniguruma syntax and runs on PCRE2 (UTF +
// UCP, JIT), with \s and \S rewritten to Oniguruma's Unicode White_Space set. Other step types
// are refused with kUnsupported, never approximated.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/json.h"

namespace anvil {

class PreTokenizer {
 public:
  PreTokenizer();
  ~PreTokenizer();
  PreTokenizer(const PreTokenizer&) = delete;
  PreTokenizer& operator=(const PreTokenizer&) = delete;

  // Appends one step: a Split or ByteLevel object of tokenizer.json (what: the file, for errors).
  void add_step(const Json& j, const std::string& what);
  // s cut by every step, empty pieces dropped; valid until this thread's next call.
  const std::vector<std::string_view>& split(std::string_view s) const;

 private:
  struct Step;
  std::vector<Step> steps_;
};

}  // namespace anvil
