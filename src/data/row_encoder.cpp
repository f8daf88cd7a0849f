// RowEncoder: a row of any shape (data/row_shapes.h) to token ids and labels, as TRL's
// SFTTrainer tokenizes it (see packing.h).
#include <algorithm>

#include "core/error.h"
#include "data/packing.h"
#include "data/source.h"

namespace anvil {
namespace {

// Labels from ids: -100 before `begin`, the ids after.
std::vector<int32_t> labels_from(const std::vector<int32_t>& ids, size_t begin) {
  std::vector<int32_t> labels(ids);
  std::fill(labels.begin(), labels.begin() + static_cast<std::ptrdiff_t>(std::min(begin, labels.size())),
            kIgnoreIndex);
  return labels;
}

// Leading ids two sequences share (TRL's common_prefix_length).
size_t common_prefix(const std::vector<int32_t>& a, const std::vector<int32_t>& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

}  // namespace

RowEncoder::RowEncoder(const Tokenizer& tokenizer, const ChatTemplate* chat_template, bool assistant_only_loss)
    : RowEncoder(tokenizer, chat_template,
                 RowOptions{assistant_only_loss, true, true, std::string(), ColumnMap()}) {}

RowEncoder::RowEncoder(const Tokenizer& tokenizer, const ChatTemplate* chat_template, RowOptions options)
    : tokenizer_(tokenizer), template_(chat_template), o_(std::move(options)) {}

void RowEncoder::encode_line(std::string_view line, TokenizedRow& out) const { encode_row(parse_row(line), out); }

void RowEncoder::encode_row(const OrderedJson& row, TokenizedRow& out) const {
  out.ids.clear();
  out.labels.clear();
  out.rendered.clear();
  out.pair_split = 0;
  const ShapedRow s = shape_row(row, o_.columns);
  ANVIL_ENSURE((s.shape == RowShape::kPreference) == o_.preference, kInvalidInput,
               o_.preference ? "--objective dpo trains on preference rows ({\"prompt\", \"chosen\", \"rejected\"}, "
                               "or chosen and rejected conversations alone), this row is of another shape"
                             : "a preference row ({\"chosen\", \"rejected\"}) trains with --objective dpo");
  if (s.shape == RowShape::kPreference) encode_preference(s, out);
  else if (s.shape == RowShape::kMessages) encode_chat(s.messages, out);
  else if (s.shape == RowShape::kText) encode_text(s.text, out);
  else encode_prompt_completion(s, out);
}

const ChatTemplate& RowEncoder::need_template(const char* what) const {
  ANVIL_ENSURE(template_ != nullptr, kInvalidInput, what, " needs a chat template, and the tokenizer folder has none");
  return *template_;
}

void RowEncoder::encode_chat(const OrderedJson& messages, TokenizedRow& out) const {
  const ChatTemplate& t = need_template("a \"messages\" row");
  out.rendered = t.render(messages, false);
  ANVIL_ENSURE(!out.rendered.empty(), kInvalidInput, "the chat template renders this row to nothing");
  tokenizer_.encode_append(out.rendered, out.ids);
  if (o_.assistant_only_loss) out.labels = span_labels(tokenizer_, out.ids, t.assistant_spans(messages, out.rendered));
  else if (o_.labels) out.labels = out.ids;
}

void RowEncoder::encode_text(const std::string& text, TokenizedRow& out) const {
  ANVIL_ENSURE(!o_.assistant_only_loss, kInvalidInput,
               "assistant-only loss needs conversational rows ({\"messages\": [...]}), this is a text row");
  tokenizer_.encode_append(text, out.ids);
  if (o_.labels) out.labels = out.ids;
}

void RowEncoder::encode_prompt_completion(const ShapedRow& row, TokenizedRow& out) const {
  ANVIL_ENSURE(o_.labels || !o_.completion_only_loss, kInvalidInput,
               "a prompt-completion row after rows of another shape: the data's first row decides whether the "
               "completion's labels are kept (put prompt-completion rows in a data set of their own, or train on "
               "the whole row with --no-completion-only-loss)");
  std::vector<int32_t> prompt_ids;
  if (row.conversational) {
    const ChatTemplate& t = need_template("a conversational prompt-completion row");
    OrderedJson messages = row.prompt;
    for (const OrderedJson& m : row.completion) messages.push_back(m);
    tokenizer_.encode_append(t.render(row.prompt, true), prompt_ids);
    out.rendered = t.render(messages, false);
    tokenizer_.encode_append(out.rendered, out.ids);
    if (o_.assistant_only_loss)
      out.labels = span_labels(tokenizer_, out.ids, t.assistant_spans(messages, out.rendered));
  } else {
    ANVIL_ENSURE(!o_.assistant_only_loss, kInvalidInput, "assistant-only loss needs conversational rows, this "
                 "prompt-completion row holds strings (--completion-only-loss trains on its completion)");
    const std::string& prompt = row.prompt.get_ref<const std::string&>();
    std::string completion = row.completion.get<std::string>();
    const std::string& eos = o_.eos_token;
    const bool ends_with_eos =
        completion.size() >= eos.size() && completion.compare(completion.size() - eos.size(), eos.size(), eos) == 0;
    if (!ends_with_eos) completion += eos;
    tokenizer_.encode_append(prompt, prompt_ids);
    tokenizer_.encode_append(prompt + completion, out.ids);
  }
  if (!o_.completion_only_loss) {
    if (o_.labels && out.labels.empty()) out.labels = out.ids;
    return;
  }
  const std::vector<int32_t> on_completion = labels_from(out.ids, common_prefix(prompt_ids, out.ids));
  if (out.labels.empty()) {
    out.labels = on_completion;
    return;
  }
  for (size_t k = 0; k < out.labels.size(); ++k)  // assistant-only too: both masks
    if (on_completion[k] == kIgnoreIndex) out.labels[k] = kIgnoreIndex;
}

void RowEncoder::encode_preference(const ShapedRow& row, TokenizedRow& out) const {
  std::vector<int32_t> prompt_ids, chosen_ids, rejected_ids;
  if (row.conversational) {
    const ChatTemplate& t = need_template("a conversational preference row");
    auto render = [&](const OrderedJson& completion, std::vector<int32_t>& ids) {
      OrderedJson messages = row.prompt;
      for (const OrderedJson& m : completion) messages.push_back(m);
      tokenizer_.encode_append(t.render(messages, false), ids);
    };
    tokenizer_.encode_append(t.render(row.prompt, true), prompt_ids);
    render(row.chosen, chosen_ids);
    render(row.rejected, rejected_ids);
  } else {
    const std::string& prompt = row.prompt.get_ref<const std::string&>();
    const std::string& eos = o_.eos_token;
    auto with_eos = [&](std::string text) {
      if (text.size() < eos.size() || text.compare(text.size() - eos.size(), eos.size(), eos) != 0) text += eos;
      return text;
    };
    tokenizer_.encode_append(prompt, prompt_ids);
    tokenizer_.encode_append(prompt + with_eos(row.chosen.get<std::string>()), chosen_ids);
    tokenizer_.encode_append(prompt + with_eos(row.rejected.get<std::string>()), rejected_ids);
  }
  const size_t prompt_len = std::min(common_prefix(prompt_ids, chosen_ids), common_prefix(prompt_ids, rejected_ids));
  if (o_.max_length > 0) {  // TRL: the pair dropped when its prompt fills max_length, else each sequence cut
    const auto keep = static_cast<size_t>(o_.max_length);
    if (prompt_len >= keep) {
      out.dropped = true;
      return;
    }
    chosen_ids.resize(std::min(chosen_ids.size(), keep));
    rejected_ids.resize(std::min(rejected_ids.size(), keep));
  }
  out.labels = labels_from(chosen_ids, prompt_len);
  const std::vector<int32_t> rejected_labels = labels_from(rejected_ids, prompt_len);
  out.labels.insert(out.labels.end(), rejected_labels.begin(), rejected_labels.end());
  out.ids = std::move(chosen_ids);
  out.pair_split = static_cast<int64_t>(out.ids.size());
  out.ids.insert(out.ids.end(), rejected_ids.begin(), rejected_ids.end());
}

std::vector<int32_t> span_labels(const Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                                 const std::vector<std::pair<size_t, size_t>>& spans) {
  std::vector<int32_t> labels(ids.size(), kIgnoreIndex);
  size_t offset = 0, s = 0;
  for (size_t k = 0; k < ids.size(); ++k) {
    while (s < spans.size() && spans[s].second <= offset) ++s;
    if (s < spans.size() && offset >= spans[s].first && offset < spans[s].second) labels[k] = ids[k];
    offset += tokenizer.token_bytes(ids[k]).size();
  }
  return labels;
}

bool prompt_rows_first(const std::vector<std::string>& files, const ColumnMap& columns) {
  for (const std::string& file : files) {
    const std::unique_ptr<RowReader> reader = RowReader::open(file, columns);
    const std::unique_ptr<RowBatch> batch = reader->next(1, 1);
    if (!batch || batch->size() == 0) continue;
    try {
      return shape_row(batch->row(0), columns).shape == RowShape::kPromptCompletion;
    } catch (const Error&) {
      return false;  // a bad first row: packing says what is wrong with it
    }
  }
  return false;
}

}  // namespace anvil
