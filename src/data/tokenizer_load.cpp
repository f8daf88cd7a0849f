// Loading a tokenizer.json into Tokenizer::Impl (see tokenizer.h for the pipeline and its reasons).
//
// Loading is on the path of every `anvil prepare`, and a tokenizer.json is large (Qwen3: 11 MB,
// 151k vocab entries, 151k merges), so it is parsed with simdjson, and the two big tables are
// built without nlohmann::json: the vocabulary's bytes go to one buffer indexed by an
// open-addressing table, and the merges resolve their ids in parallel before entering the
// merge table in rank order (the first of equal pairs wins, as before). Every other part of
// the file is small and goes through nlohmann::json as it always did. A file simdjson refuses
// is parsed again with nlohmann::json, whose error names the position. load() maps the file
// rather than reading it: on VMs where a page fault is slow, the memory a load touches for the
// first time is most of its cost, so the big tables are sized once and nothing is copied twice.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <simdjson.h>
#include <utf8proc.h>

#include <algorithm>
#include <climits>
#include <future>

#include "core/error.h"
#include "core/fs.h"
#include "core/hash.h"
#include "core/json.h"
#include "core/threads.h"
#include "data/tokenizer.h"
#include "data/tokenizer_impl.h"

namespace anvil {

namespace {

// Ids index tables of one entry per id (the vocabulary's, the added tokens'): 2^24, 64 times
// the largest vocabulary in use, bounds them to tens of MB whatever a file claims.
constexpr int64_t kMaxTokenId = int64_t{1} << 24;

// nlohmann's errors for a part of the wrong JSON type name no file: they are the file's error.
template <class F>
Tokenizer refusing_malformed(const std::string& what, F&& parse) {
  try {
    return parse();
  } catch (const nlohmann::json::exception& e) {
    raise(ErrorKind::kInvalidInput, what, ": malformed tokenizer.json (", e.what(), ")");
  }
}

// Calls load(component) for j, or for each member of a Sequence (listed under `members`, nested
// Sequences in turn); nothing for null.
template <class F>
void for_each_component(const Json& j, const char* members, F&& load) {
  if (j.is_null()) return;
  if (j.value("type", "") == "Sequence") {
    for (const Json& p : j.at(members)) for_each_component(p, members, load);
    return;
  }
  load(j);
}

int normal_form_options(const std::string& type) {
  const int base = UTF8PROC_STABLE;
  if (type == "NFC") return base | UTF8PROC_COMPOSE;
  if (type == "NFD") return base | UTF8PROC_DECOMPOSE;
  if (type == "NFKC") return base | UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
  if (type == "NFKD") return base | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
  return -1;
}

// The utf8proc options of one normalizer of tokenizer.json.
int normalizer_options(const Json& j, const std::string& what) {
  const std::string type = j.value("type", "");
  const int options = normal_form_options(type);
  ANVIL_ENSURE(options >= 0, kUnsupported, what, ": normalizer '", type,
               "' is not supported (anvil handles NFC, NFD, NFKC, NFKD and Sequence of them)");
  return options;
}

void require_byte_level_decoder(const Json& j, const std::string& what) {
  const std::string type = j.is_null() ? "none" : j.value("type", "");
  ANVIL_ENSURE(type == "ByteLevel", kUnsupported, what, ": decoder '", type,
               "' is not supported (anvil handles byte-level BPE with the ByteLevel decoder)");
}

// A file mapped read-only and followed by at least SIMDJSON_PADDING readable bytes (anonymous
// zero pages), so simdjson parses it in place. Mapping the page cache costs a few ms where
// reading 11 MB into fresh memory costs ~90 ms on VMs with slow page faults. Not ok() when
// the file is empty or cannot be mapped (the caller reads it instead, for the error).
// As with any mapping, truncating the file while it is mapped would fault the reader.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    struct stat st {};
    if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
      const auto size = static_cast<size_t>(st.st_size);
      const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
      const size_t total = (size + simdjson::SIMDJSON_PADDING + page - 1) / page * page;
      void* base = ::mmap(nullptr, total, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (base != MAP_FAILED) {
        if (::mmap(base, size, PROT_READ, MAP_PRIVATE | MAP_FIXED | MAP_POPULATE, fd, 0) == MAP_FAILED) {
          ::munmap(base, total);
        } else {
          base_ = base;
          size_ = size;
          total_ = total;
        }
      }
    }
    ::close(fd);
  }
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (base_ != nullptr) ::munmap(base_, total_);
  }
  bool ok() const { return base_ != nullptr; }
  std::string_view text() const { return std::string_view(static_cast<const char*>(base_), size_); }

 private:
  void* base_ = nullptr;
  size_t size_ = 0, total_ = 0;
};

// A small part of the file as nlohmann::json.
Json to_json(simdjson::dom::element e) { return Json::parse(simdjson::to_string(e)); }

// The whole file as nlohmann::json, less model.vocab and model.merges (read from simdjson).
Json small_parts(simdjson::dom::object root) {
  Json j = Json::object();
  for (const auto& field : root) {
    simdjson::dom::object model;
    if (field.key != "model" || field.value.get(model) != simdjson::SUCCESS) {
      j[std::string(field.key)] = to_json(field.value);
      continue;
    }
    Json m = Json::object();
    for (const auto& f : model)
      if (f.key != "vocab" && f.key != "merges") m[std::string(f.key)] = to_json(f.value);
    j["model"] = std::move(m);
  }
  return j;
}

void check_bpe_model(const Json& model, const std::string& what) {
  const std::string type = model.value("type", "");
  ANVIL_ENSURE(type == "BPE", kUnsupported, what, ": tokenizer model type '", type,
               "' is not supported; anvil handles byte-level BPE (Qwen2/2.5/3, Llama 3)");
  ANVIL_ENSURE(!model.value("byte_fallback", false), kUnsupported, what,
               ": BPE with byte_fallback (SentencePiece style) is not supported; anvil handles byte-level BPE");
  ANVIL_ENSURE(model.value("dropout", Json()).is_null(), kUnsupported, what, ": BPE dropout is not supported");
  ANVIL_ENSURE(model.value("continuing_subword_prefix", Json("")).is_null() ||
                   model.value("continuing_subword_prefix", std::string()).empty(),
               kUnsupported, what, ": BPE continuing_subword_prefix is not supported");
  ANVIL_ENSURE(model.value("end_of_word_suffix", Json("")).is_null() ||
                   model.value("end_of_word_suffix", std::string()).empty(),
               kUnsupported, what, ": BPE end_of_word_suffix is not supported");
}

// The id of an entry of added_tokens, checked as the vocabulary's are: the tables are sized by it.
int32_t added_token_id(const Json& a, const std::string& what) {
  const Json& id = a.at("id");
  ANVIL_ENSURE(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < kMaxTokenId, kInvalidInput,
               what, ": added token ", a.dump(), " has no id in [0, ", kMaxTokenId, ")");
  return id.get<int32_t>();
}

// model.vocab into bpe.vocab and bpe.byte_id; id_used sized one past the largest id (of the
// vocabulary and of `added`, the added_tokens) and marked for the vocabulary's ids.
void load_vocab(simdjson::dom::object vocab, const Json& added, const std::string& what, BpeModel& bpe,
                std::vector<bool>& id_used) {
  int32_t max_id = -1;
  size_t key_bytes = 0;
  for (const auto& entry : vocab) {
    int64_t id = 0;
    ANVIL_ENSURE(entry.value.get(id) == simdjson::SUCCESS, kInvalidInput, what, ": vocab entry '", entry.key,
                 "' has id ", simdjson::to_string(entry.value), ", not an integer");
    ANVIL_ENSURE(id >= 0, kInvalidInput, what, ": negative id for vocab entry '", entry.key, "'");
    ANVIL_ENSURE(id < kMaxTokenId, kUnsupported, what, ": id ", id, " of vocab entry '", entry.key,
                 "' is beyond the ids anvil indexes (", kMaxTokenId, ")");
    max_id = std::max(max_id, static_cast<int32_t>(id));
    key_bytes += entry.key.size();
  }
  for (const Json& a : added) max_id = std::max(max_id, added_token_id(a, what));
  id_used.assign(static_cast<size_t>(max_id + 1), false);
  bpe.vocab.reserve(vocab.size(), key_bytes);
  for (const auto& entry : vocab) {
    const auto id = static_cast<int32_t>(entry.value.get_int64().value_unsafe());
    bpe.vocab.add(entry.key, id);
    id_used[static_cast<size_t>(id)] = true;
  }
  bpe.vocab.finish(static_cast<size_t>(max_id + 1));
  for (int b = 0; b < 256; ++b) {
    const char c = static_cast<char>(b);
    bpe.byte_id[b] = bpe.vocab.find(std::string_view(&c, 1));
  }
}

struct MergeIds {
  int32_t a, b, merged;
};

// The ids of every merge of model.merges, in rank order; each resolves on its own (in parallel).
std::vector<MergeIds> resolve_merges(simdjson::dom::array merges, const Vocab& vocab, const std::string& what) {
  std::vector<simdjson::dom::element> merge_items;
  merge_items.reserve(merges.size());
  for (simdjson::dom::element m : merges) merge_items.push_back(m);
  std::vector<MergeIds> merge_ids(merge_items.size());
  parallel_for(static_cast<int64_t>(merge_items.size()), 16384, [&](int64_t begin, int64_t end) {
    std::string bytes;
    for (int64_t rank = begin; rank < end; ++rank) {
      const simdjson::dom::element m = merge_items[static_cast<size_t>(rank)];
      std::string_view a, b;
      if (m.is_string()) {
        const std::string_view s = m.get_string().value_unsafe();
        const size_t sp = s.find(' ', 1);
        ANVIL_ENSURE(sp != std::string_view::npos, kInvalidInput, what, ": merge ", rank, " '", s, "' is not 'a b'");
        a = s.substr(0, sp);
        b = s.substr(sp + 1);
      } else {
        simdjson::dom::array pair;
        ANVIL_ENSURE(m.get(pair) == simdjson::SUCCESS && pair.size() == 2 && pair.at(0).get(a) == simdjson::SUCCESS &&
                         pair.at(1).get(b) == simdjson::SUCCESS,
                     kInvalidInput, what, ": merge ", rank, " is not a pair of strings");
      }
      bytes.clear();
      append_byte_level_bytes(a, bytes);
      const size_t split = bytes.size();
      append_byte_level_bytes(b, bytes);
      const std::string_view both = bytes;
      const MergeIds ids{vocab.find(both.substr(0, split)), vocab.find(both.substr(split)), vocab.find(both)};
      ANVIL_ENSURE(ids.a >= 0 && ids.b >= 0 && ids.merged >= 0, kInvalidInput, what, ": merge ", rank, " ('", a,
                   "', '", b, "') names a token missing from the vocab");
      merge_ids[static_cast<size_t>(rank)] = ids;
    }
  });
  return merge_ids;
}

// One entry of added_tokens.
AddedToken parse_added_token(const Json& a, const std::string& what) {
  AddedToken tok;
  tok.id = added_token_id(a, what);
  tok.content = a.at("content").get<std::string>();
  tok.special = a.value("special", false);
  tok.single_word = a.value("single_word", false);
  tok.lstrip = a.value("lstrip", false);
  tok.rstrip = a.value("rstrip", false);
  tok.normalized = a.value("normalized", !tok.special);
  return tok;
}

}  // namespace

Tokenizer Tokenizer::load(const std::string& path) {
  const std::string file = is_directory(path) ? path_join(path, "tokenizer.json") : path;
  ANVIL_ENSURE(path_exists(file), kNotFound, file, ": no tokenizer.json (pass --tokenizer a model folder or the file)");
  const MappedFile mapped(file);
  if (!mapped.ok()) return from_json(read_file(file), file);  // read_file's error says why
  return refusing_malformed(file, [&] { return parse(mapped.text(), true, file); });
}

Tokenizer Tokenizer::from_json(const std::string& json_text, const std::string& what) {
  return refusing_malformed(what, [&] { return parse(json_text, false, what); });
}

Tokenizer Tokenizer::parse(std::string_view json_text, bool padded, const std::string& what) {
  auto t = std::make_unique<Impl>();
  t->what = what;
  // Work that needs only the text or a count runs beside the rest; a future's destructor
  // waits for it, so no exit path leaves it running.
  auto hashed = std::async(std::launch::async, [json_text] { return hash_hex(json_text); });
  simdjson::dom::parser parser;
  simdjson::dom::element doc;
  if (const auto err = parser.parse(json_text.data(), json_text.size(), !padded).get(doc); err != simdjson::SUCCESS) {
    json_parse(std::string(json_text), what);  // nlohmann::json's error names the position
    raise(ErrorKind::kInvalidInput, what, ": not valid JSON (", simdjson::error_message(err), ")");
  }
  simdjson::dom::object root, model_doc;
  ANVIL_ENSURE(doc.get(root) == simdjson::SUCCESS, kInvalidInput, what, ": not a JSON object");
  const Json j = small_parts(root);
  ANVIL_ENSURE(j.contains("model") && j.at("model").is_object() && root["model"].get(model_doc) == simdjson::SUCCESS,
               kInvalidInput, what, ": no \"model\" object");
  const Json& model = j.at("model");
  check_bpe_model(model, what);
  t->bpe.ignore_merges = model.value("ignore_merges", false);
  require_byte_level_decoder(j.value("decoder", Json()), what);
  const Json normalizer = j.value("normalizer", Json()), pre_tokenizer = j.value("pre_tokenizer", Json());
  for_each_component(normalizer, "normalizers", [&](const Json& n) {
    t->normalizer_options.push_back(normalizer_options(n, what));
  });
  for_each_component(pre_tokenizer, "pretokenizers", [&](const Json& p) { t->pre_tokenizer.add_step(p, what); });

  simdjson::dom::object vocab;
  ANVIL_ENSURE(model_doc["vocab"].get(vocab) == simdjson::SUCCESS, kInvalidInput, what,
               ": model.vocab is missing or not an object");
  simdjson::dom::array merges;
  ANVIL_ENSURE(model_doc["merges"].get(merges) == simdjson::SUCCESS, kInvalidInput, what,
               ": model.merges is missing or not an array");
  // The merge table's memory is touched for the first time while the vocabulary is built.
  auto merge_table =
      std::async(std::launch::async, [impl = t.get(), n = merges.size()] { impl->bpe.merges.reserve(n); });
  const Json added = j.value("added_tokens", Json::array());
  load_vocab(vocab, added, what, t->bpe, t->id_used);
  const std::vector<MergeIds> merge_ids = resolve_merges(merges, t->bpe.vocab, what);
  merge_table.get();
  if (merge_ids.size() > merges.size()) t->bpe.merges.reserve(merge_ids.size());  // size() saturates at 2^24 - 1
  for (size_t rank = 0; rank < merge_ids.size(); ++rank)
    t->bpe.merges.insert(merge_ids[rank].a, merge_ids[rank].b, static_cast<int32_t>(rank), merge_ids[rank].merged);

  for (const Json& a : added) {
    AddedToken tok = parse_added_token(a, what);
    const auto index = static_cast<int32_t>(t->added.size());
    t->added_by_id[tok.id] = index;
    t->added_by_content[tok.content] = tok.id;
    t->added_decoded.push_back(byte_level_to_bytes(tok.content));
    if (tok.normalized) t->normalized_matcher.add(index, t->normalize(tok.content));
    else t->raw_matcher.add(index, tok.content);
    t->id_used[static_cast<size_t>(tok.id)] = true;
    t->added.push_back(std::move(tok));
  }
  t->raw_matcher.finish();
  t->normalized_matcher.finish();
  t->hash = hashed.get();
  return Tokenizer(std::move(t));
}

}  // namespace anvil
