// anvil prepare: tokenize and pack rows (data/source.h) into a memory-mapped block file
// (data/packing.h: the packing, the file format and what the header records).
#include <chrono>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/config_flags.h"
#include "core/fs.h"
#include "core/log.h"
#include "data/packing.h"
#include "data/source.h"

namespace anvil {

int cmd_prepare(int argc, char** argv) {
  PrepareOptions o;
  std::string out, split = "train", config;
  std::vector<std::string> specs;
  Objective objective = Objective::kSft;
  Args args("prepare",
            "tokenize chats or texts (JSONL plain, .gz, .zst; Parquet; folders of them; hub dataset ids in the "
            "local cache) and pack them into blocks of --seq-len tokens in "
            "OUT/packed.bin, on every core");
  args.opt("--tokenizer", &o.tokenizer, "DIR", "folder with tokenizer.json (and tokenizer_config.json for chats)", true)
      .list("--data", &specs, "FILE|DIR|ID", "data files, folders or hub dataset ids, packed in the order given", true)
      .opt("--split", &split, "NAME", "the split of hub dataset ids")
      .opt("--data-config", &config, "NAME", "the config (subset) of hub dataset ids")
      .opt("--seq-len", &o.seq_len, "N", "tokens per block", true)
      .opt("--out", &out, "DIR", "output folder (created)", true);
  bind_packing(args, &o.packing)
      .flag("--assistant-only-loss", &o.assistant_only_loss,
            "store labels that are -100 outside the assistant turns of each chat")
      .flag_off("--no-completion-only-loss", &o.completion_only_loss,
                "store no labels for prompt-completion rows (by default, as TRL, -100 on the prompt)")
      .opt("--columns", &o.columns, "FIELD=COLUMN,...",
           "read a field from another column, e.g. messages=dialog,text=body (ShareGPT's conversations needs none)")
      .flag("--skip-bad-rows", &o.skip_bad_rows, "skip and count malformed rows instead of stopping at the first");
  bind_objective_choice(args, &objective);
  bind_max_length(args, &o.max_length);
  if (!args.parse(argc, argv)) return 0;
  o.preference = objective == Objective::kDpo;
  for (const std::string& spec : specs) {
    const std::vector<std::string> files = resolve_data_source(spec, split, config);
    o.data.insert(o.data.end(), files.begin(), files.end());
  }
  const auto t0 = std::chrono::steady_clock::now();
  const Json h = prepare_packed(o, out);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("wrote %s: %s; %lld bad rows skipped; %.2f s, %.0f tokens/s\n", path_join(out, "packed.bin").c_str(),
              packing_summary(h).c_str(), static_cast<long long>(h["bad_rows"].get<int64_t>()), s,
              static_cast<double>(h["total_tokens"].get<int64_t>()) / std::max(s, 1e-9));
  // The folder holds token ids, not the tokenizer: a run on it exports the --model folder's
  // tokenizer, or (a --preset) none unless anvil train is given it.
  log_warn("anvil prepare: ", out, " holds token ids, not the tokenizer: a run on it with --preset exports a model "
           "with no tokenizer unless you pass anvil train --tokenizer ", o.tokenizer,
           " (with --model, the model folder's tokenizer is exported)");
  return 0;
}

}  // namespace anvil
