// The shapes of rows users bring, turned into one of four: a chat ({"messages": [...]}), a
// text ({"text": "..."}), a prompt and its completion (TRL's prompt-completion format:
// {"prompt": ..., "completion": ...}, both strings or both lists of messages), or a preference
// pair (TRL's preference format: {"prompt": ..., "chosen": ..., "rejected": ...}, strings or
// lists of messages; without "prompt", the implicit-prompt form: the prompt is what chosen and
// rejected share at their start, split off as TRL's extract_prompt does).
//
// Columns are found under their own names or renamed with --columns (messages=conversations,
// text=body: the canonical name, then the row's); a "conversations" column is a chat, as TRL
// reads it. Messages in ShareGPT's shape ({"from": "human"|"gpt"|"system", "value": ...})
// become {"role": "user"|"assistant"|"system", "content": ...}. A row of no known shape is
// kInvalidInput naming the shapes expected.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "data/chat_template.h"  // OrderedJson

namespace anvil {

// --columns: canonical field (messages, text, prompt, completion, chosen, rejected) -> the row's key.
class ColumnMap {
 public:
  ColumnMap() = default;
  // spec: "messages=conversations,text=body" (empty: no renames). Throws kUsage on a bad spec.
  static ColumnMap parse(const std::string& spec);
  // The row's key for a canonical field.
  std::string key(const std::string& field) const;
  bool empty() const { return renames_.empty(); }

 private:
  std::vector<std::pair<std::string, std::string>> renames_;
};

enum class RowShape { kMessages, kText, kPromptCompletion, kPreference };

struct ShapedRow {
  RowShape shape = RowShape::kText;
  bool conversational = false;  // messages, or prompt and completion as lists of messages
  OrderedJson messages;         // kMessages: {role, content} messages
  OrderedJson prompt, completion;  // kPromptCompletion: strings, or lists of {role, content}
  OrderedJson chosen, rejected;    // kPreference (with prompt): strings, or lists of {role, content}
  std::string text;             // kText
};

// One JSONL line as a row, parsed with its key order kept: kInvalidInput when it is not JSON or
// nests deeper than kMaxJsonDepth (core/json.h).
OrderedJson parse_row(std::string_view line);

// The row in its canonical shape. Throws kInvalidInput saying what is wrong and which
// shapes are expected.
ShapedRow shape_row(const OrderedJson& row, const ColumnMap& columns);

// A list of messages with {role, content} (ShareGPT's {from, value} converted and its roles
// named as chat templates know them); `field` names the list in errors.
OrderedJson chat_messages(const OrderedJson& list, const std::string& field);

}  // namespace anvil
