// anvil: the table of subcommands, and the one place where errors become exit codes.
#include <cstdio>
#include <cstring>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"

namespace {

struct Command {
  const char* name;
  const char* summary;
  int (*run)(int argc, char** argv);
};

constexpr Command kCommands[] = {
    {"train", "full fine-tune a model (ddp or fsdp, one process per GPU, or the CPU reference)",
     anvil::cmd_train},
    {"grad", "loss, logits and gradients of one batch: the parity tool against PyTorch",
     anvil::cmd_grad},
    {"plan", "memory per GPU of each mode before launching: what fits, and the advice", anvil::cmd_plan},
    {"init", "write a Hugging Face model folder with freshly initialised weights", anvil::cmd_init},
    {"prepare", "tokenize and pack JSONL data into blocks for training (every core)", anvil::cmd_prepare},
    {"tokenize", "JSONL texts or chats on stdin -> token ids (and chat renderings) on stdout", anvil::cmd_tokenize},
    {"bench", "collective bus bandwidth like nccl-tests, or GPU copy bandwidth (p2p)", anvil::cmd_bench},
    {"export", "a checkpoint -> Hugging Face model folder (or one file with the optimizer state)", anvil::cmd_export},
    {"report", "a run's --metrics as one HTML page of charts, and a summary", anvil::cmd_report},
    {"generate", "continue prompts or chat with a model (KV cache; greedy or sampled)", anvil::cmd_generate},
    {"topo", "how the GPUs are linked (like nvidia-smi topo -m) and what it means for ddp/fsdp", anvil::cmd_topo},
};

void print_usage(FILE* out) {
  std::fprintf(out,
               "anvil %s: full fine-tuning of Hugging Face language models on every GPU of one "
               "machine\n\nusage: anvil <command> [flags]   (anvil <command> --help for its flags)\n\n"
               "commands:\n",
               ANVIL_VERSION);
  for (const Command& c : kCommands) std::fprintf(out, "  %-10s %s\n", c.name, c.summary);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return 0;
  }
  if (name == "--version") {
    std::printf("anvil %s\n", ANVIL_VERSION);
    return 0;
  }
  for (const Command& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.run(argc - 2, argv + 2);
    } catch (const anvil::Error& e) {
      if (e.kind() == anvil::ErrorKind::kUsage || e.kind() == anvil::ErrorKind::kInterrupted ||
          e.kind() == anvil::ErrorKind::kTerminated)
        std::fprintf(stderr, "%s\n", e.what());
      else anvil::log_error(e.what());
      return anvil::exit_code(e.kind());
    } catch (const std::bad_alloc&) {
      anvil::log_error("out of host memory");
      return 1;
    } catch (const std::exception& e) {
      anvil::log_error("unexpected: ", e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "anvil: unknown command '%s' (see anvil --help)\n", name.c_str());
  return 2;
}
