// Fuzz target: a JSONL data file (plain, gzip or zstd: the reader tells them by their bytes),
// read as training data is read: lines in batches, each row parsed, put into its shape
// (messages, ShareGPT conversations, text, prompt-completion) and encoded as packing encodes
// it, through a chat template and a byte-level BPE tokenizer (fuzz/fixtures/chat: Qwen3's
// template, a small vocabulary), with and without assistant-only labels, and as the preference
// pairs of --objective dpo (TRL's prompt/chosen/rejected, strings or conversations).
#include "data/packing.h"
#include "data/source.h"
#include "fuzz_input.h"

namespace {

struct Encoders {
  anvil::Tokenizer tokenizer;
  anvil::ChatTemplate chat;
  anvil::RowEncoder all, assistant_only, preference;
  explicit Encoders(const std::string& dir)
      : tokenizer(anvil::Tokenizer::load(dir)),
        chat(anvil::ChatTemplate::load(dir)),
        all(tokenizer, &chat, anvil::RowOptions{false, true, true, chat.eos_token(), {}}),
        assistant_only(tokenizer, &chat, anvil::RowOptions{true, true, true, chat.eos_token(), {}}),
        preference(tokenizer, &chat, anvil::RowOptions{false, true, true, chat.eos_token(), {}, true}) {}
};

const Encoders& encoders() {
  static const Encoders e(anvil::fuzz::fixture_path("chat"));
  return e;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  encoders();  // a broken fixture fails here, once, not as a finding per input
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = anvil::fuzz::write_input("data.jsonl", data, size);
  anvil::fuzz::expect_clean([&] {
    const std::unique_ptr<anvil::RowReader> reader = anvil::RowReader::open(path);
    while (const std::unique_ptr<anvil::RowBatch> batch = reader->next(16, 1 << 16))
      for (size_t i = 0; i < batch->size(); ++i) {
        anvil::TokenizedRow out;
        anvil::fuzz::expect_clean([&] { encoders().all.encode_row(batch->row(i), out); });
        anvil::fuzz::expect_clean([&] { encoders().assistant_only.encode_row(batch->row(i), out); });
        anvil::fuzz::expect_clean([&] { encoders().preference.encode_row(batch->row(i), out); });
      }
  });
  return 0;
}
