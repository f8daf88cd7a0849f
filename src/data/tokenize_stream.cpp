// tokenize_jsonl (see tokenize_stream.h).
#include "data/tokenize_stream.h"

#include <memory>
#include <vector>

#include "core/error.h"
#include "core/fs.h"
#include "core/threads.h"
#include "data/packing.h"
#include "data/worker_pool.h"

namespace anvil {

int64_t tokenize_jsonl(std::istream& in, std::ostream& out, const TokenizeOptions& o) {
  const Tokenizer tokenizer = Tokenizer::load(o.tokenizer);
  std::unique_ptr<ChatTemplate> tmpl;
  if (o.chat) tmpl = std::make_unique<ChatTemplate>(ChatTemplate::load(is_directory(o.tokenizer) ? o.tokenizer : "."));
  const RowEncoder encoder(tokenizer, tmpl.get(), /*assistant_only_loss=*/false);
  WorkerPool pool(hardware_threads());

  constexpr size_t kBatch = 1024;
  std::vector<std::string> lines, outputs, errors;
  std::vector<int64_t> numbers;
  int64_t line_number = 0, rows = 0;
  bool more = true;
  while (more) {
    lines.clear();
    numbers.clear();
    std::string line;
    while (lines.size() < kBatch) {
      if (!std::getline(in, line)) {
        more = false;
        break;
      }
      ++line_number;
      if (!line.empty() && line.back() == '\r') line.pop_back();
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      lines.push_back(std::move(line));
      numbers.push_back(line_number);
    }
    outputs.assign(lines.size(), std::string());
    errors.assign(lines.size(), std::string());
    pool.run(static_cast<int64_t>(lines.size()), [&](int64_t i) {
      const auto k = static_cast<size_t>(i);
      try {
        const OrderedJson row = parse_row(lines[k]);
        ANVIL_ENSURE(o.chat || !(row.is_object() && row.contains("messages")), kInvalidInput,
                     "a \"messages\" row: pass --chat to render it with the chat template");
        TokenizedRow t;
        encoder.encode_row(row, t);
        OrderedJson j = OrderedJson::object();
        if (row.contains("messages")) j["rendered"] = t.rendered;
        j["ids"] = t.ids;
        outputs[k] = j.dump();
      } catch (const std::exception& e) {
        errors[k] = e.what();
      }
    });
    for (size_t k = 0; k < lines.size(); ++k) {
      ANVIL_ENSURE(errors[k].empty(), kInvalidInput, o.source, ":", numbers[k], ": bad row: ", errors[k]);
      out << outputs[k] << '\n';
      ++rows;
    }
    out.flush();
  }
  return rows;
}

}  // namespace anvil
