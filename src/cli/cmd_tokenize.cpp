// anvil tokenize: JSONL rows on stdin, one JSON line of token ids per row on stdout
// (data/tokenize_stream.h says what each row becomes).
#include <iostream>

#include "cli/args.h"
#include "cli/commands.h"
#include "data/tokenize_stream.h"

namespace anvil {

int cmd_tokenize(int argc, char** argv) {
  TokenizeOptions o;
  Args args("tokenize",
            "read JSONL rows ({\"text\": ...} or, with --chat, {\"messages\": [...]}) on stdin and write "
            "{\"ids\": [...]} or {\"rendered\": ..., \"ids\": [...]} per row on stdout");
  args.opt("--tokenizer", &o.tokenizer, "DIR", "folder with tokenizer.json (and tokenizer_config.json)", true)
      .flag("--chat", &o.chat, "render {\"messages\": [...]} rows with the model's chat template first");
  if (!args.parse(argc, argv)) return 0;
  std::ios::sync_with_stdio(false);
  tokenize_jsonl(std::cin, std::cout, o);
  return 0;
}

}  // namespace anvil
