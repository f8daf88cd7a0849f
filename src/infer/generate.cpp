// anvil generate: the model loaded for inference, token sampling, and the rows of prompts (see generate.h).
#include "infer/generate.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cmath>
#include <istream>
#include <numeric>
#include <optional>
#include <ostream>
#include <random>

#include "core/error.h"
#include "core/fs.h"
#include "core/log.h"
#include "core/units.h"
#include "data/chat_template.h"
#include "data/jsonl.h"
#include "data/row_shapes.h"
#include "data/tokenizer.h"
#include "io/hf_export.h"
#include "io/hub.h"
#include "infer/decoder.h"
#include "model/weights.h"
#include "ops/ops.h"

namespace anvil {
namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void add_ids(const Json& v, std::vector<int32_t>& out) {
  if (v.is_number_integer()) out.push_back(v.get<int32_t>());
  if (v.is_array())
    for (const Json& e : v)
      if (e.is_number_integer()) out.push_back(e.get<int32_t>());
}

// EOS ids of the model folder's generation_config.json and config.json (either may give one
// id or a list) and the id of the tokenizer's tokenizer_config.json eos_token (where a chat
// template ends a turn).
std::vector<int32_t> read_eos_ids(const std::string& dir, const std::string& tokenizer_dir, const ModelConfig& c) {
  std::vector<int32_t> ids;
  if (const std::optional<int64_t> id = tokenizer_eos_id(tokenizer_dir)) ids.push_back(static_cast<int32_t>(*id));
  const std::string gen = path_join(dir, "generation_config.json");
  if (path_exists(gen)) {
    const Json g = json_read_file(gen);
    if (g.contains("eos_token_id")) add_ids(g["eos_token_id"], ids);
  }
  if (c.raw.contains("eos_token_id")) add_ids(c.raw["eos_token_id"], ids);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

// A seed per prompt: splitmix64 of (seed, index), so that prompts get independent streams.
uint64_t prompt_seed(uint64_t seed, uint64_t index) {
  uint64_t z = seed + 0x9e3779b97f4a7c15ull * (index + 1);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

}  // namespace

int32_t pick_token(const float* logits, int64_t V, const SamplingOptions& s, double u) {
  if (s.temperature <= 0.0) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  const float mx = *std::max_element(logits, logits + V);
  const double inv_t = 1.0 / s.temperature;
  auto weight = [&](int32_t v) { return std::exp(static_cast<double>(logits[v] - mx) * inv_t); };
  // Candidates by descending logit (ties: lower id first); only as many are sorted as the
  // top-k and top-p cuts need.
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  const int64_t k = s.top_k > 0 ? std::min<int64_t>(s.top_k, V) : V;
  int64_t sorted = std::min<int64_t>(k, 64);
  std::partial_sort(order.begin(), order.begin() + (k < V ? k : sorted), order.end(), by_logit);
  if (k < V) sorted = k;
  double total = 0;  // the softmax's denominator over the top k
  if (k < V) {
    for (int64_t i = 0; i < k; ++i) total += weight(order[static_cast<size_t>(i)]);
  } else {
    for (int64_t v = 0; v < V; ++v) total += weight(static_cast<int32_t>(v));
  }
  int64_t keep = k;
  if (s.top_p < 1.0) {  // the nucleus: the shortest prefix whose probability reaches top_p
    double cum = 0;
    for (int64_t i = 0;; ++i) {
      if (i == sorted) {
        const int64_t more = std::min<int64_t>(sorted * 16, k);
        std::partial_sort(order.begin() + sorted, order.begin() + more, order.end(), by_logit);
        sorted = more;
      }
      cum += weight(order[static_cast<size_t>(i)]) / total;
      if (cum >= s.top_p || i + 1 == k) {
        keep = i + 1;
        break;
      }
    }
  }
  double kept = 0;
  for (int64_t i = 0; i < keep; ++i) kept += weight(order[static_cast<size_t>(i)]);
  const double target = u * kept;
  double acc = 0;
  for (int64_t i = 0; i < keep; ++i) {
    acc += weight(order[static_cast<size_t>(i)]);
    if (target < acc) return order[static_cast<size_t>(i)];
  }
  return order[static_cast<size_t>(keep - 1)];
}

// ---- Generator

struct Generator::Impl {
  ModelConfig config;
  ParamTable table;
  std::unique_ptr<Ops> ops;
  std::unique_ptr<ResidentWeights> weights;
  std::unique_ptr<Decoder> decoder;
  std::vector<int32_t> eos;
  GenerateTiming timing;

  Impl(const std::string& dir, const std::string& device, const std::string& tokenizer_dir)
      : config(load_config(dir)), table(config, 1), ops(make_ops(device, 0)) {
    const double t0 = now_seconds();
    {
      HostUnits host = make_host_units(table);
      load_hf_weights(dir, table, host);
      weights = std::make_unique<ResidentWeights>(table, *ops, host);
    }
    decoder = std::make_unique<Decoder>(config, table, *ops, *weights);
    eos = read_eos_ids(dir, tokenizer_dir, config);
    log_info("loaded ", dir, ": ", config.architecture, ", ", format_count(static_cast<double>(config.num_parameters())),
             " parameters, ", dtype_name(ops->compute_dtype()), " on ", ops->runtime().name(), " (",
             format_bytes(static_cast<double>(weights->bytes())), ", ", format_seconds(now_seconds() - t0), ")");
  }

  bool is_eos(int32_t id) const { return std::binary_search(eos.begin(), eos.end(), id); }

  struct Run;
};

// One generate() call: its prompts, sampling and outputs, the buffers its steps reuse, and
// the group of prompts in flight (decoded together, at most `batch` of them).
struct Generator::Impl::Run {
  Run(Impl& impl, const std::vector<std::vector<int32_t>>& prompts_in, const SamplingOptions& sampling,
      uint64_t first, const std::function<void(size_t, int32_t)>& on_token_in)
      : m(impl), prompts(prompts_in), s(sampling), first_index(first), on_token(on_token_in),
        ctx(impl.config.max_position_embeddings), V(impl.config.vocab_size), greedy(sampling.temperature <= 0),
        out(prompts_in.size()) {}

  Impl& m;
  const std::vector<std::vector<int32_t>>& prompts;
  const SamplingOptions& s;
  uint64_t first_index;
  const std::function<void(size_t, int32_t)>& on_token;
  int64_t ctx, V;
  bool greedy;
  std::vector<std::vector<int32_t>> out;
  std::vector<float> logits;
  std::vector<int32_t> picked;  // greedy: the argmax of each output row, found on the device
  DecodeRows rows;
  size_t g0 = 0, n = 0;  // the group in flight: prompts g0 .. g0 + n - 1
  std::vector<std::mt19937_64> rng;
  std::vector<bool> done;

  void forward() {
    if (greedy) m.decoder->forward_greedy(rows, picked);
    else m.decoder->forward(rows, logits);
  }

  // Appends sequence i's next token (from output row `row`); marks the sequence done when it stops.
  void choose(size_t i, size_t row) {
    const int32_t id = greedy ? picked[row] : pick_token(logits.data() + row * static_cast<size_t>(V), V, s,
                                                         uniform(rng[i]));
    std::vector<int32_t>& seq = out[g0 + i];
    seq.push_back(id);
    if (on_token) on_token(g0 + i, id);
    const int64_t length = static_cast<int64_t>(prompts[g0 + i].size() + seq.size());
    done[i] = m.is_eos(id) || static_cast<int64_t>(seq.size()) >= s.max_new_tokens || length >= ctx;
  }

  void run_group(size_t first, size_t count) {
    g0 = first;
    n = count;
    int64_t longest = 0;
    for (size_t i = 0; i < n; ++i) longest = std::max<int64_t>(longest, static_cast<int64_t>(prompts[g0 + i].size()));
    m.decoder->reserve_cache(static_cast<int64_t>(n), std::min(ctx, longest + s.max_new_tokens));
    rng.clear();
    done.assign(n, false);
    prefill();
    decode();
  }

  // Prefill: every prompt token of the group, packed; logits of each prompt's last token.
  void prefill() {
    rows.clear();
    for (size_t i = 0; i < n; ++i) {
      const std::vector<int32_t>& p = prompts[g0 + i];
      for (size_t t = 0; t < p.size(); ++t) rows.add(p[t], static_cast<int32_t>(i), static_cast<int32_t>(t));
      rows.outputs.push_back(static_cast<int32_t>(rows.ids.size() - 1));
      rng.emplace_back(prompt_seed(s.seed, first_index + g0 + i));
    }
    const double t0 = now_seconds();
    forward();
    m.timing.prefill_seconds += now_seconds() - t0;
    m.timing.prefill_tokens += static_cast<int64_t>(rows.ids.size());
    for (size_t i = 0; i < n; ++i) choose(i, i);
  }

  // Decode: one row per sequence of the group (a fixed shape, so the step can be replayed);
  // a finished sequence's row recomputes a harmless token at position 0 of its own slot.
  void decode() {
    const double t0 = now_seconds();
    while (std::find(done.begin(), done.end(), false) != done.end()) {
      rows.clear();
      int64_t active = 0;
      for (size_t i = 0; i < n; ++i) {
        const std::vector<int32_t>& seq = out[g0 + i];
        const int32_t pos = static_cast<int32_t>(prompts[g0 + i].size() + seq.size() - 1);
        rows.add(seq.back(), static_cast<int32_t>(i), done[i] ? 0 : pos);
        rows.outputs.push_back(static_cast<int32_t>(i));
        active += !done[i];
      }
      forward();
      m.timing.decode_tokens += active;
      for (size_t i = 0; i < n; ++i)
        if (!done[i]) choose(i, i);
    }
    m.timing.decode_seconds += now_seconds() - t0;
  }
};

Generator::Generator(const std::string& model_dir, const std::string& device, const std::string& tokenizer_dir)
    : impl_(std::make_unique<Impl>(model_dir, device, tokenizer_dir.empty() ? model_dir : tokenizer_dir)) {}
Generator::~Generator() = default;
const ModelConfig& Generator::config() const { return impl_->config; }
const std::vector<int32_t>& Generator::eos_ids() const { return impl_->eos; }
const GenerateTiming& Generator::timing() const { return impl_->timing; }
void Generator::set_cuda_graphs(bool on) { impl_->decoder->set_recording(on); }

std::vector<std::vector<int32_t>> Generator::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                      const SamplingOptions& s, int64_t batch, uint64_t first_index,
                                                      const std::function<void(size_t, int32_t)>& on_token) {
  const int64_t ctx = impl_->config.max_position_embeddings;
  ANVIL_ENSURE(batch >= 1 && s.max_new_tokens >= 1, kUsage, "batch and max-new-tokens must be at least 1");
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t len = static_cast<int64_t>(prompts[i].size());
    ANVIL_ENSURE(len >= 1, kInvalidInput, "prompt ", first_index + i, " is empty");
    ANVIL_ENSURE(len < ctx, kInvalidInput, "prompt ", first_index + i, " has ", len,
                 " tokens: longer than the model's context allows (max_position_embeddings ", ctx,
                 ", and one position is needed for a new token)");
  }
  Impl::Run run(*impl_, prompts, s, first_index, on_token);
  for (size_t g0 = 0; g0 < prompts.size(); g0 += static_cast<size_t>(batch))
    run.run_group(g0, std::min(prompts.size() - g0, static_cast<size_t>(batch)));
  return std::move(run.out);
}

// ---- the command

namespace {

// The text of generated ids. A model's vocabulary may be larger than its tokenizer's (padded
// embeddings); ids past the tokenizer have no text and are left out of it.
std::string ids_text(const Tokenizer& tok, std::vector<int32_t> ids) {
  std::erase_if(ids, [&](int32_t id) { return id >= tok.vocab_size(); });
  return tok.decode(ids, true);
}

// Streams the text of new ids as they come: the decoded text is printed up to its end,
// held back while it ends in an incomplete UTF-8 character (decode() shows U+FFFD there).
class TextStream {
 public:
  TextStream(const Tokenizer& tok, std::ostream& out) : tok_(tok), out_(out) {}
  void add(int32_t id) {
    ids_.push_back(id);
    const std::string s = ids_text(tok_, ids_);
    if (s.size() >= 3 && s.compare(s.size() - 3, 3, "\xEF\xBF\xBD") == 0) return;
    flush_from(s);
  }
  void finish() {
    flush_from(ids_text(tok_, ids_));
    ids_.clear();
    printed_ = 0;
  }

 private:
  void flush_from(const std::string& s) {
    if (s.size() > printed_) out_ << s.substr(printed_) << std::flush;
    printed_ = std::max(printed_, s.size());
  }
  const Tokenizer& tok_;
  std::ostream& out_;
  std::vector<int32_t> ids_;
  size_t printed_ = 0;
};

// What a run needs besides the model: the tokenizer and chat template, loaded when present.
struct TextSide {
  std::string dir;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<ChatTemplate> chat;

  explicit TextSide(const std::string& d) : dir(d) {
    if (path_exists(path_join(dir, "tokenizer.json"))) tokenizer = std::make_unique<Tokenizer>(Tokenizer::load(dir));
  }
  const Tokenizer& need_tokenizer(const char* why) const {
    ANVIL_ENSURE(tokenizer != nullptr, kInvalidInput, why, " needs a tokenizer, and ", dir,
                 " has no tokenizer.json (name a folder that has one with --tokenizer DIR, or give token ids as "
                 "{\"input_ids\": [...]} rows)");
    return *tokenizer;
  }
  const ChatTemplate& need_chat() {
    if (!chat) chat = std::make_unique<ChatTemplate>(ChatTemplate::load(dir));
    return *chat;
  }
  // The ids of a chat with the generation prompt after it.
  std::vector<int32_t> chat_ids(const OrderedJson& messages) {
    ANVIL_ENSURE(messages.is_array() && !messages.empty(), kInvalidInput, "\"messages\" must be a non-empty array");
    for (size_t i = 0; i < messages.size(); ++i) {
      const OrderedJson& msg = messages[i];
      ANVIL_ENSURE(msg.is_object() && msg.contains("role") && msg["role"].is_string(), kInvalidInput, "message ", i,
                   " must be an object with a string \"role\"");
      const std::string role = msg["role"].get<std::string>();
      ANVIL_ENSURE(role == "system" || role == "user" || role == "assistant" || role == "tool", kInvalidInput,
                   "message ", i, " has the unknown role '", role, "' (system, user, assistant or tool)");
    }
    const Tokenizer& tok = need_tokenizer("a chat");
    return tok.encode(need_chat().render(messages, true));
  }
  // A row of an --input file: {"messages"}, {"text"} or {"input_ids"}.
  std::vector<int32_t> row_ids(const std::string& line) {
    const OrderedJson row = parse_row(line);
    ANVIL_ENSURE(row.is_object(), kInvalidInput, "a row must be a JSON object");
    if (row.contains("messages")) return chat_ids(row["messages"]);
    if (row.contains("text")) {
      ANVIL_ENSURE(row["text"].is_string(), kInvalidInput, "\"text\" must be a string");
      return need_tokenizer("a \"text\" row").encode(row["text"].get<std::string>());
    }
    if (row.contains("input_ids")) {
      const OrderedJson& ids = row["input_ids"];
      ANVIL_ENSURE(ids.is_array(), kInvalidInput, "\"input_ids\" must be an array of token ids");
      std::vector<int32_t> out;
      for (const OrderedJson& v : ids) {
        ANVIL_ENSURE(v.is_number_integer(), kInvalidInput, "\"input_ids\" must hold integers");
        out.push_back(v.get<int32_t>());
      }
      return out;
    }
    raise(ErrorKind::kInvalidInput, "a row must hold \"messages\", \"text\" or \"input_ids\"");
  }
};

// Checks a prompt against the model before generating, so the error can name its row.
void check_prompt(const std::vector<int32_t>& ids, const ModelConfig& c) {
  ANVIL_ENSURE(!ids.empty(), kInvalidInput, "the prompt is empty");
  ANVIL_ENSURE(static_cast<int64_t>(ids.size()) < c.max_position_embeddings, kInvalidInput, "the prompt has ",
               ids.size(), " tokens: longer than the model's context (max_position_embeddings ",
               c.max_position_embeddings, ", one position is needed for a new token)");
  for (int32_t id : ids)
    ANVIL_ENSURE(id >= 0 && id < c.vocab_size, kInvalidInput, "token id ", id, " is outside the vocabulary of ",
                 c.vocab_size);
}

void run_rows(Generator& gen, TextSide& text, const GenerateOptions& o, std::ostream& out, int64_t& count) {
  LineReader reader(o.input);
  std::vector<std::vector<int32_t>> prompts;
  auto flush = [&] {
    if (prompts.empty()) return;
    const auto news = gen.generate(prompts, o.sampling, o.batch, static_cast<uint64_t>(count));
    for (const auto& ids : news) {
      OrderedJson j = OrderedJson::object();
      j["ids"] = ids;
      if (text.tokenizer) j["text"] = ids_text(*text.tokenizer, ids);
      out << j.dump() << '\n';
    }
    out.flush();
    count += static_cast<int64_t>(prompts.size());
    prompts.clear();
  };
  std::string line;
  while (reader.next(line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    try {
      prompts.push_back(text.row_ids(line));
      check_prompt(prompts.back(), gen.config());
    } catch (const Error& e) {
      raise(e.kind(), o.input, ":", reader.line_number(), ": ", e.what());
    }
    if (static_cast<int64_t>(prompts.size()) == o.batch) flush();
  }
  flush();
}

// Generates one prompt's continuation, streaming its text; returns the new ids.
std::vector<int32_t> stream_one(Generator& gen, const Tokenizer& tok, const std::vector<int32_t>& ids,
                                const GenerateOptions& o, uint64_t index, std::ostream& out) {
  check_prompt(ids, gen.config());
  TextStream stream(tok, out);
  auto news = gen.generate({ids}, o.sampling, 1, index, [&](size_t, int32_t id) { stream.add(id); });
  stream.finish();
  out << '\n' << std::flush;
  return news[0];
}

void run_chat(Generator& gen, TextSide& text, const GenerateOptions& o, std::istream& in, std::ostream& out,
              int64_t& count) {
  const Tokenizer& tok = text.need_tokenizer("an interactive chat");
  text.need_chat();
  if (o.terminal) log_info("chat with the model: one message per line; /reset forgets the conversation; Ctrl-D ends");
  OrderedJson history = OrderedJson::array();
  std::string line;
  while (true) {
    if (o.terminal) std::fputs("> ", stderr);
    if (!std::getline(in, line)) break;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") == std::string::npos) continue;
    if (line == "/reset") {
      history = OrderedJson::array();
      continue;
    }
    history.push_back({{"role", "user"}, {"content", line}});
    std::vector<int32_t> news = stream_one(gen, tok, text.chat_ids(history), o, static_cast<uint64_t>(count), out);
    while (!news.empty() && std::binary_search(gen.eos_ids().begin(), gen.eos_ids().end(), news.back()))
      news.pop_back();
    history.push_back({{"role", "assistant"}, {"content", ids_text(tok, news)}});
    ++count;
  }
}

}  // namespace

int64_t run_generate(const GenerateOptions& o, std::istream& in, std::ostream& out) {
  ANVIL_ENSURE(o.input.empty() || !o.has_prompt, kUsage, "generate: give --input or --prompt, not both");
  ANVIL_ENSURE(!o.chat || o.has_prompt, kUsage, "generate: --chat applies to --prompt");
  ANVIL_ENSURE(o.sampling.max_new_tokens >= 1, kUsage, "generate: --max-new-tokens must be at least 1");
  ANVIL_ENSURE(o.batch >= 1, kUsage, "generate: --batch must be at least 1");
  ANVIL_ENSURE(o.sampling.temperature >= 0, kUsage, "generate: --temperature must be 0 (greedy) or more");
  ANVIL_ENSURE(o.sampling.top_p > 0 && o.sampling.top_p <= 1, kUsage, "generate: --top-p must be in (0, 1]");
  ANVIL_ENSURE(o.sampling.top_k >= 0, kUsage, "generate: --top-k must be 0 (all) or more");
  const std::string dir = resolve_model_dir(o.model);
  ANVIL_ENSURE(o.tokenizer.empty() || path_exists(path_join(o.tokenizer, "tokenizer.json")), kUsage,
               "generate: --tokenizer ", o.tokenizer, " has no tokenizer.json");
  TextSide text(o.tokenizer.empty() ? dir : o.tokenizer);
  if (o.has_prompt) text.need_tokenizer("--prompt");
  Generator gen(dir, o.device, o.tokenizer);
  gen.set_cuda_graphs(o.cuda_graphs);
  int64_t count = 0;
  if (!o.input.empty()) {
    run_rows(gen, text, o, out, count);
  } else if (o.has_prompt) {
    const Tokenizer& tok = *text.tokenizer;
    const std::vector<int32_t> ids =
        o.chat ? text.chat_ids(OrderedJson::array({{{"role", "user"}, {"content", o.prompt}}})) : tok.encode(o.prompt);
    stream_one(gen, tok, ids, o, 0, out);
    count = 1;
  } else {
    run_chat(gen, text, o, in, out, count);
  }
  const GenerateTiming& t = gen.timing();
  const double prefill_rate = t.prefill_seconds > 0 ? t.prefill_tokens / t.prefill_seconds : 0.0;
  const double decode_rate = t.decode_seconds > 0 ? t.decode_tokens / t.decode_seconds : 0.0;
  log_info("generated for ", count_of(count, "prompt"), "; prefill: ", count_of(t.prefill_tokens, "token"), " in ",
           format_seconds(t.prefill_seconds), " (", format_count(prefill_rate), " tokens/s); decode: ",
           count_of(t.decode_tokens, "token"), " in ", format_seconds(t.decode_seconds), " (",
           format_count(decode_rate), " tokens/s)");
  return count;
}

}  // namespace anvil
