// Row shapes: --columns renames, ShareGPT messages, prompt-completion rows (see row_shapes.h).
#include "data/row_shapes.h"

#include "core/error.h"
#include "core/json.h"

namespace anvil {
namespace {

constexpr const char* kShapes =
    "{\"messages\": [{\"role\": ..., \"content\": ...}, ...]}, {\"conversations\": [{\"from\": ..., \"value\": ...}, "
    "...]}, {\"text\": \"...\"} or {\"prompt\": ..., \"completion\": ...} (other column names: --columns "
    "messages=NAME)";

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
    ANVIL_ENSURE(name == "messages" || name == "text" || name == "prompt" || name == "completion", kUsage,
                 "--columns: unknown field '", name, "' (messages, text, prompt or completion)");
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
