// Row shapes: --columns renames, ShareGPT messages, prompt-completion rows (see row_shapes.h).
#include "data/row_shapes.h"

#include <algorithm>

#include "core/error.h"
#include "core/json.h"

namespace anvil {
namespace {

constexpr const char* kShapes =
    "{\"messages\": [{\"role\": ..., \"content\": ...}, ...]}, {\"conversations\": [{\"from\": ..., \"value\": ...}, "
    "...]}, {\"text\": \"...\"}, {\"prompt\": ..., \"completion\": ...} or {\"prompt\": ..., \"chosen\": ..., "
    "\"rejected\": ...} (other column names: --columns messages=NAME)";

// ShareGPT's speakers as chat templates name them.
std::string role_of(const std::string& from) {
  if (from == "human") return "user";
  if (from == "gpt") return "assistant";
  return from;
}

// The keys of a row, for the message when none is known.
std::string keys_of(const OrderedJson& row) {
  std::string keys;
  for (auto it = row.begin(); it != row.end(); ++it) keys += (keys.empty() ? "" : ", ") + it.key();
  return keys.empty() ? std::string("none") : keys;
}

const OrderedJson* field(const OrderedJson& row, const std::string& key) {
  const auto it = row.find(key);
  return it == row.end() ? nullptr : &*it;
}

// A prompt-completion row: both strings (standard) or both lists of messages (conversational).
void shape_prompt_completion(const OrderedJson& prompt, const OrderedJson& completion, const ColumnMap& columns,
                             ShapedRow& s) {
  s.shape = RowShape::kPromptCompletion;
  if (prompt.is_string() && completion.is_string()) {
    s.prompt = prompt;
    s.completion = completion;
    return;
  }
  ANVIL_ENSURE(prompt.is_array() && completion.is_array(), kInvalidInput, "\"", columns.key("prompt"), "\" and \"",
               columns.key("completion"), "\" must both be strings or both be lists of messages");
  s.conversational = true;
  s.prompt = chat_messages(prompt, columns.key("prompt"));
  s.completion = chat_messages(completion, columns.key("completion"));
}

// The prompt chosen and rejected share at their start (TRL's extract_prompt, quirks and all:
// the first index where they differ, a space before it left to the completions; when one is a
// prefix of the other, all but the shorter's last element).
void extract_prompt(const OrderedJson& chosen, const OrderedJson& rejected, ShapedRow& s) {
  const bool text = chosen.is_string();
  const std::string c = text ? chosen.get<std::string>() : std::string(), r = text ? rejected.get<std::string>() : "";
  const size_t n = text ? std::min(c.size(), r.size()) : std::min(chosen.size(), rejected.size());
  ANVIL_ENSURE(n > 0, kInvalidInput, "an implicit-prompt preference row needs non-empty \"chosen\" and \"rejected\"");
  size_t idx = 0;
  for (idx = 0; idx < n; ++idx)
    if (text ? c[idx] != r[idx] : chosen[idx] != rejected[idx]) break;
  if (idx == n) idx = n - 1;  // Python's loop variable after a loop that never broke
  else if (text && idx > 0 && c[idx - 1] == ' ') --idx;
  if (text) {
    s.prompt = c.substr(0, idx);
    s.chosen = c.substr(idx);
    s.rejected = r.substr(idx);
    return;
  }
  s.prompt = OrderedJson::array();
  s.chosen = OrderedJson::array();
  s.rejected = OrderedJson::array();
  for (size_t i = 0; i < chosen.size(); ++i) (i < idx ? s.prompt : s.chosen).push_back(chosen[i]);
  for (size_t i = idx; i < rejected.size(); ++i) s.rejected.push_back(rejected[i]);
}

// A preference row: prompt (or none: implicit), chosen and rejected, all strings or all lists of messages.
void shape_preference(const OrderedJson* prompt, const OrderedJson& chosen, const OrderedJson& rejected,
                      const ColumnMap& columns, ShapedRow& s) {
  s.shape = RowShape::kPreference;
  const bool text = chosen.is_string() && rejected.is_string() && (!prompt || prompt->is_string());
  const bool lists = chosen.is_array() && rejected.is_array() && (!prompt || prompt->is_array());
  ANVIL_ENSURE(text || lists, kInvalidInput, "\"", columns.key("chosen"), "\" and \"", columns.key("rejected"), "\"",
               prompt ? cat(" and \"", columns.key("prompt"), "\"") : std::string(),
               " must all be strings or all be lists of messages");
  s.conversational = lists;
  if (lists) {
    const OrderedJson c = chat_messages(chosen, columns.key("chosen")), r = chat_messages(rejected, columns.key("rejected"));
    if (prompt) {
      s.prompt = chat_messages(*prompt, columns.key("prompt"));
      s.chosen = c;
      s.rejected = r;
    } else {
      extract_prompt(c, r, s);
    }
    return;
  }
  if (prompt) {
    s.prompt = *prompt;
    s.chosen = chosen;
    s.rejected = rejected;
  } else {
    extract_prompt(chosen, rejected, s);
  }
}

}  // namespace

OrderedJson parse_row(std::string_view line) {
  check_json_depth(line, "the row");
  try {
    return OrderedJson::parse(line);
  } catch (const nlohmann::json::exception& e) {
    raise(ErrorKind::kInvalidInput, "not valid JSON (", e.what(), ")");
  }
}

ColumnMap ColumnMap::parse(const std::string& spec) {
  ColumnMap m;
  size_t start = 0;
  while (start < spec.size()) {
    const size_t comma = spec.find(',', start);
    const std::string item = spec.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const size_t eq = item.find('=');
    const std::string name = eq == std::string::npos ? item : item.substr(0, eq);
    ANVIL_ENSURE(eq != std::string::npos && eq + 1 < item.size(), kUsage, "--columns: '", item,
                 "' is not FIELD=COLUMN (e.g. --columns messages=conversations)");
    ANVIL_ENSURE(name == "messages" || name == "text" || name == "prompt" || name == "completion" ||
                     name == "chosen" || name == "rejected",
                 kUsage, "--columns: unknown field '", name, "' (messages, text, prompt, completion, chosen or rejected)");
    m.renames_.emplace_back(name, item.substr(eq + 1));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return m;
}

std::string ColumnMap::key(const std::string& name) const {
  for (const auto& [from, to] : renames_)
    if (from == name) return to;
  return name;
}

OrderedJson chat_messages(const OrderedJson& list, const std::string& name) {
  ANVIL_ENSURE(list.is_array() && !list.empty(), kInvalidInput, "\"", name, "\" must be a non-empty array");
  OrderedJson out = OrderedJson::array();
  for (size_t i = 0; i < list.size(); ++i) {
    const OrderedJson& m = list[i];
    OrderedJson msg = m;
    if (m.is_object() && !m.contains("role") && m.contains("from") && m["from"].is_string()) {
      msg = OrderedJson::object();  // ShareGPT: {from, value}
      msg["role"] = role_of(m["from"].get<std::string>());
      msg["content"] = m.value("value", OrderedJson());
    }
    ANVIL_ENSURE(msg.is_object() && msg.contains("role") && msg["role"].is_string(), kInvalidInput, "message ", i,
                 " must be an object with a string \"role\" (or ShareGPT's \"from\" and \"value\")");
    // Chat templates skip a role they do not know without a word: the turn would vanish.
    const std::string& role = msg["role"].get_ref<const std::string&>();
    ANVIL_ENSURE(role == "system" || role == "user" || role == "assistant" || role == "tool" || role == "ipython",
                 kInvalidInput, "message ", i, " has the unknown role \"", role,
                 "\" (known: system, user, assistant, tool, ipython; ShareGPT's human and gpt)");
    out.push_back(std::move(msg));
  }
  return out;
}

ShapedRow shape_row(const OrderedJson& row, const ColumnMap& columns) {
  ANVIL_ENSURE(row.is_object(), kInvalidInput, "a row must be a JSON object: ", kShapes);
  ShapedRow s;
  const std::string messages_key = columns.key("messages");
  const OrderedJson* messages = field(row, messages_key);
  const bool conversations = messages == nullptr && messages_key == "messages";
  if (conversations) messages = field(row, "conversations");
  if (messages) {
    s.shape = RowShape::kMessages;
    s.conversational = true;
    s.messages = chat_messages(*messages, conversations ? std::string("conversations") : messages_key);
    return s;
  }
  const OrderedJson* prompt = field(row, columns.key("prompt"));
  const OrderedJson* chosen = field(row, columns.key("chosen"));
  const OrderedJson* rejected = field(row, columns.key("rejected"));
  if (chosen || rejected) {
    ANVIL_ENSURE(chosen && rejected, kInvalidInput, "a preference row needs both \"", columns.key("chosen"),
                 "\" and \"", columns.key("rejected"), "\"");
    shape_preference(prompt, *chosen, *rejected, columns, s);
    return s;
  }
  const OrderedJson* completion = field(row, columns.key("completion"));
  if (prompt || completion) {
    ANVIL_ENSURE(prompt && completion, kInvalidInput, "a prompt-completion row needs both \"", columns.key("prompt"),
                 "\" and \"", columns.key("completion"), "\"");
    shape_prompt_completion(*prompt, *completion, columns, s);
    return s;
  }
  if (const OrderedJson* text = field(row, columns.key("text"))) {
    ANVIL_ENSURE(text->is_string(), kInvalidInput, "\"", columns.key("text"), "\" must be a string");
    s.text = text->get<std::string>();
    return s;
  }
  raise(ErrorKind::kInvalidInput, "a row must hold one of ", kShapes, "; this one has ", keys_of(row));
}

}  // namespace anvil
