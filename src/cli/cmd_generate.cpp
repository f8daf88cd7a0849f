// anvil generate --model DIR|ID [--tokenizer DIR] [--input FILE.jsonl | --prompt TEXT [--chat]] [sampling] [--device] [--batch]
#include <unistd.h>

#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/config_flags.h"
#include "infer/generate.h"

namespace anvil {

int cmd_generate(int argc, char** argv) {
  GenerateOptions o;
  int64_t seed = 0;
  bool no_graphs = false;
  Args a("generate",
         "Continue prompts with a model: rows of --input ({\"messages\": [...]} rendered with the chat template and\n"
         "its generation prompt, {\"text\": ...} or {\"input_ids\": [...]}) give one JSON line each on stdout,\n"
         "{\"ids\": [new ids], \"text\": \"new text\"} (no text without a tokenizer); --prompt streams its text; with\n"
         "neither, an interactive chat reads one message per line from stdin and keeps the conversation.\n"
         "Temperature 0 is greedy; generation stops at the model's EOS tokens (generation_config.json,\n"
         "config.json and tokenizer_config.json's eos_token) or --max-new-tokens.\n"
         "Prefill and decode timings go to stderr. On a GPU (--device cuda) the weights are bf16.");
  a.opt("--model", &o.model, "DIR|ID", "model folder, or a hub id in the local Hugging Face cache", true)
      .opt("--tokenizer", &o.tokenizer, "DIR",
           "the tokenizer's folder (tokenizer.json, tokenizer_config.json), for a model folder without them")
      .opt("--input", &o.input, "FILE", "JSONL rows (plain, .gz or .zst)")
      .opt("--prompt", &o.prompt, "TEXT", "one prompt, its continuation streamed to stdout")
      .flag("--chat", &o.chat, "--prompt is one user turn, rendered with the chat template")
      .opt("--max-new-tokens", &o.sampling.max_new_tokens, "N", "most new tokens per prompt")
      .opt("--temperature", &o.sampling.temperature, "T", "0: greedy; otherwise sample from softmax(logits / T)")
      .opt("--top-p", &o.sampling.top_p, "P", "sample from the smallest set of tokens with probability >= P")
      .opt("--top-k", &o.sampling.top_k, "K", "sample from the K most likely tokens (0: all)")
      .opt("--seed", &seed, "S", "sampling seed (each prompt's stream depends on it and the prompt's index)")
      .opt("--batch", &o.batch, "B", "prompts generated at once (train's sequences per step: --micro-batch)")
      .flag("--no-cuda-graphs", &no_graphs, "run the decode step's kernels one by one (timing comparisons)");
  o.device.clear();
  bind_device(a, &o.device);
  if (!a.parse(argc, argv)) return 0;
  o.device = device_or_default(o.device, "generate");
  o.has_prompt = a.given("--prompt");
  o.sampling.seed = static_cast<uint64_t>(seed);
  o.cuda_graphs = !no_graphs;
  o.terminal = isatty(STDIN_FILENO) != 0;
  std::ios::sync_with_stdio(false);
  run_generate(o, std::cin, std::cout);
  return 0;
}

}  // namespace anvil
