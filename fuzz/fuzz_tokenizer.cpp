// Fuzz target: a tokenizer.json, loaded as `anvil prepare` loads it (mapped, parsed with
// simdjson), then used: texts encoded (scripts, combining marks, whitespace runs, special
// tokens inside text), the ids decoded back, every token's bytes looked up.
#include <algorithm>

#include "data/tokenizer.h"
#include "fuzz_input.h"

namespace {

const char* const kTexts[] = {
    "Hello, world! It's 2024-06-01 and I'm testing",
    "  leading and   inner   spaces\t\ttabs\r\nCRLF\n\n\nnewlines ",
    "caf\xc3\xa9 e\xcc\x81 \xef\xac\x81 \xe2\x84\x8c \xe2\x91\xa0",     // é, e + combining acute, ﬁ, ℌ, ①
    "\xe4\xbd\xa0\xe5\xa5\xbd\xe4\xb8\x96\xe7\x95\x8c \xf0\x9f\x98\x80\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd 123456789",
    "<|im_start|>user\nhi<|im_end|><|endoftext|><|begin_of_text|> <think></think>",
    "",
};

void use(const anvil::Tokenizer& tok) {
  for (const char* text : kTexts) {
    const std::vector<int32_t> ids = tok.encode(text);
    tok.decode(ids, false);
    tok.decode(ids, true);
  }
  tok.token_to_id("<|im_end|>");
  for (int32_t id = 0; id < std::min(tok.vocab_size(), 1 << 16); ++id)
    anvil::fuzz::expect_clean([&] { tok.token_bytes(id); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = anvil::fuzz::write_input("tokenizer.json", data, size);
  anvil::fuzz::expect_clean([&] { use(anvil::Tokenizer::load(path)); });
  return 0;
}
