// Fuzz target: a chat template (the Jinja text of a tokenizer folder's chat_template.jinja,
// or of tokenizer_config.json's "chat_template"), loaded as ChatTemplate::load loads it,
// parsed, and rendered over a few chats as packing renders rows: whole, with the generation
// prompt, and cut into assistant turns.
#include <filesystem>

#include "data/chat_template.h"
#include "fuzz_input.h"

namespace {

// The chats: roles, tool calls, reasoning, a system turn, odd contents.
const char* const kChats[] = {
    R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}])",
    R"([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "<think>\nadd\n</think>\n\n4"}, {"role": "user", "content": ""}])",
    R"([{"role": "user", "content": "weather?"},
        {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function":
          {"name": "get_weather", "arguments": {"city": "Paris", "days": [1, 2.5, null, true]}}}]},
        {"role": "tool", "content": "{\"temp\": 21}"}, {"role": "assistant", "reasoning_content": "r",
         "content": "21 degrees \u00e9\ud83d\ude00"}])",
};

// The tokenizer folder: the input as chat_template.jinja beside a fixed tokenizer_config.json.
std::string tokenizer_dir(const uint8_t* data, size_t size) {
  const std::string dir = anvil::fuzz::scratch_dir() + "/tokenizer";
  if (!std::filesystem::exists(dir + "/tokenizer_config.json")) {
    std::filesystem::create_directories(dir);
    std::filesystem::copy_file(anvil::fuzz::fixture_path("chat/tokenizer_config.json"), dir + "/tokenizer_config.json");
  }
  anvil::fuzz::write_input("tokenizer/chat_template.jinja", data, size);
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string dir = tokenizer_dir(data, size);
  anvil::fuzz::expect_clean([&] {
    const anvil::ChatTemplate chat = anvil::ChatTemplate::load(dir);
    for (const char* text : kChats) {
      const anvil::OrderedJson messages = anvil::OrderedJson::parse(text);
      anvil::fuzz::expect_clean([&] { chat.render(messages, true, {{"enable_thinking", false}}); });
      anvil::fuzz::expect_clean([&] { chat.assistant_spans(messages, chat.render(messages, false)); });
    }
  });
  return 0;
}
