// `anvil tokenize`: JSONL rows in, one JSON line of ids per row out, in input order.
//
// {"text": "..."} -> {"ids": [...]}; with chat, {"messages": [...]} -> {"rendered": "...",
// "ids": [...]} (the chat template's rendering, then its ids without added special tokens,
// exactly what packing trains on). Rows are encoded in parallel batches; output order is input
// order. A bad row is kInvalidInput naming `source` and its line.
#pragma once

#include <istream>
#include <ostream>
#include <string>

namespace anvil {

struct TokenizeOptions {
  std::string tokenizer;  // folder with tokenizer.json (and tokenizer_config.json for --chat)
  bool chat = false;      // accept {"messages": [...]} rows
  std::string source = "stdin";
};

// Returns the number of rows written.
int64_t tokenize_jsonl(std::istream& in, std::ostream& out, const TokenizeOptions& o);

}  // namespace anvil
