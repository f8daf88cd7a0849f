// anvil: the table of subcommands, and the one place where errors become output and exit
// codes. Every error speaks in one voice, "anvil <command>: <what> (<how to fix>)", on
// stderr: 2 for bad input, 1 for a failure while running, 3 for a missing device (see
// exit_code in core/error.h). SIGPIPE is ignored: output piped into a reader that has gone
// (`anvil train ... | tee log`, then Ctrl-C) fails a write instead of killing the process,
// so a run still stops gracefully and saves.
#include <signal.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

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

// True when `what` opens with "<words>: " (lower-case words: a command's name, "bench p2p").
bool opens_with_command(const std::string& what) {
  const size_t colon = what.find(": ");
  if (colon == std::string::npos || colon == 0) return false;
  for (size_t i = 0; i < colon; ++i) {
    const unsigned char c = static_cast<unsigned char>(what[i]);
    if (!std::islower(c) && !std::isdigit(c) && c != ' ') return false;
  }
  return true;
}

// The error's one line: "anvil <command>: <what>"; a message that names its command already
// ("anvil train: ...", "generate: ...") keeps it, once.
std::string error_line(const std::string& command, const std::string& what) {
  if (what.rfind("anvil ", 0) == 0 && opens_with_command(what)) return what;
  if (what.rfind(command + ": ", 0) == 0) return "anvil " + what;
  return "anvil " + command + ": " + what;
}

int report_error(const std::string& command, const std::string& what, int code) {
  const std::string line = error_line(command, what) + "\n";
  std::fputs(line.c_str(), stderr);
  return code;
}

}  // namespace

int main(int argc, char** argv) {
  ::signal(SIGPIPE, SIG_IGN);
  anvil::set_program_name(argv[0]);
  if (argc < 2) {
    print_usage(stderr);
    return 2;
  }
  // anvil help CMD [SUB]: anvil CMD [SUB] --help.
  char help_flag[] = "--help";
  std::vector<char*> help_argv;
  if (std::strcmp(argv[1], "help") == 0 && argc >= 3) {
    help_argv.assign(argv, argv + argc);
    help_argv.erase(help_argv.begin() + 1);
    help_argv.push_back(help_flag);
    argv = help_argv.data();
    argc = static_cast<int>(help_argv.size());
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
      return report_error(name, e.what(), anvil::exit_code(e.kind()));
    } catch (const std::bad_alloc&) {
      return report_error(name, "out of host memory (a smaller --micro-batch or --seq-len needs less)", 1);
    } catch (const std::exception& e) {
      return report_error(name, anvil::cat("unexpected: ", e.what()), 1);
    }
  }
  std::fprintf(stderr, "anvil: unknown command '%s' (see anvil --help)\n", name.c_str());
  return 2;
}
