// anvil generate: continuations of prompts with a KV cache (infer/decoder.h).
//
// Generator loads a model folder for inference (compute copies of the weights only) and
// continues batches of prompts: one prefill of every prompt of the batch, then one token
// per sequence per step, until each stops at an EOS token (generation_config.json,
// config.json and tokenizer_config.json's eos_token), at max_new_tokens, or at the model's context. Temperature 0 is greedy
// (the first largest logit); otherwise the logits are divided by the temperature, cut to
// the top_k largest and the top_p nucleus, and sampled with a generator seeded by (seed,
// the prompt's index), so a prompt's continuation does not depend on the batch it is in.
// run_generate is the command: input rows, a single prompt, or an interactive chat.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "model/config.h"

namespace anvil {

struct SamplingOptions {
  int64_t max_new_tokens = 256;
  double temperature = 0.0;  // 0: greedy
  double top_p = 1.0;
  int64_t top_k = 0;  // 0: all
  uint64_t seed = 0;
};

struct GenerateTiming {
  int64_t prefill_tokens = 0, decode_tokens = 0;
  double prefill_seconds = 0, decode_seconds = 0;
};

class Generator {
 public:
  // model_dir: a resolved model folder; device: cpu | cuda; tokenizer_dir: where the
  // tokenizer's files are (its eos_token ends a turn), empty: the model folder.
  Generator(const std::string& model_dir, const std::string& device, const std::string& tokenizer_dir = "");
  ~Generator();

  // Continues each prompt (token ids); batch: how many run at once. first_index: the index
  // of prompts[0] among all prompts of the run (the sampling seed of each prompt). on_token
  // (optional) sees every new token as it is chosen: (index in prompts, id). Returns the
  // new ids of each prompt, its final EOS token included.
  std::vector<std::vector<int32_t>> generate(const std::vector<std::vector<int32_t>>& prompts,
                                             const SamplingOptions& s, int64_t batch, uint64_t first_index = 0,
                                             const std::function<void(size_t, int32_t)>& on_token = {});

  const ModelConfig& config() const;
  const std::vector<int32_t>& eos_ids() const;
  const GenerateTiming& timing() const;
  void set_cuda_graphs(bool on);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The token a sampler picks from one row of logits (vocab_size floats); u: a uniform
// number in [0, 1) (unused when greedy).
int32_t pick_token(const float* logits, int64_t vocab_size, const SamplingOptions& s, double u);

struct GenerateOptions {
  std::string model;   // folder or hub id
  std::string tokenizer;  // a folder with tokenizer.json (and its config); empty: the model folder
  std::string input;   // JSONL rows; empty: --prompt or interactive
  std::string prompt;  // one text prompt
  bool has_prompt = false;
  bool chat = false;  // --prompt is one user turn of a chat
  SamplingOptions sampling;
  std::string device = "cpu";
  int64_t batch = 1;
  bool cuda_graphs = true;
  bool terminal = false;  // stdin is a terminal: the interactive chat prompts for each line
};

// The command: writes JSON lines (rows) or streamed text (--prompt, interactive) to out,
// timings to the log. Returns the number of prompts continued.
int64_t run_generate(const GenerateOptions& o, std::istream& in, std::ostream& out);

}  // namespace anvil
