// The run's config tree: see train/config.h.
#include "train/config.h"

#include <string>

#include "core/error.h"

namespace anvil {
namespace {

// The training settings a checkpoint records, one row each: its key in meta.json's "train",
// whether a change of it makes a resumed run differ from an uninterrupted one (the split of
// the global batch into micro-batches and accumulation does not), and its value in the
// resolved config on `world` ranks. The compared ones are named in this order.
struct RecordedSetting {
  const char* key;
  bool compared;
  Json (*value)(const TrainConfig& c, int world);
  bool refused = false;  // a resume that changes it is refused: the run would train another objective
};

constexpr RecordedSetting kRecorded[] = {
    {"data", true, [](const TrainConfig& c, int) { return Json(c.data.source); }},
    {"seq_len", true, [](const TrainConfig& c, int) { return Json(c.data.seq_len); }},
    {"assistant_only_loss", true, [](const TrainConfig& c, int) { return Json(c.data.assistant_only_loss); }},
    {"seed", true, [](const TrainConfig& c, int) { return Json(c.seed); }},
    {"shuffle", true, [](const TrainConfig& c, int) { return Json(c.data.shuffle); }},
    {"micro_batch", false, [](const TrainConfig& c, int) { return Json(c.data.micro_batch); }},
    {"grad_accum", false, [](const TrainConfig& c, int) { return Json(c.data.grad_accum); }},
    {"global_batch", true,
     [](const TrainConfig& c, int world) {
       return Json(c.data.micro_batch * c.data.grad_accum * world / c.parallel.context_parallel);
     }},
    {"steps", true, [](const TrainConfig& c, int) { return Json(c.steps); }},
    {"lr", true, [](const TrainConfig& c, int) { return Json(c.optim.schedule.lr); }},
    {"warmup", true, [](const TrainConfig& c, int) { return Json(c.optim.schedule.warmup_steps); }},
    {"schedule", true, [](const TrainConfig& c, int) { return Json(c.optim.schedule.decay); }},
    {"lr_min", true, [](const TrainConfig& c, int) { return Json(c.optim.schedule.lr_min); }},
    {"weight_decay", true, [](const TrainConfig& c, int) { return Json(c.optim.adamw.weight_decay); }},
    {"beta1", true, [](const TrainConfig& c, int) { return Json(c.optim.adamw.beta1); }},
    {"beta2", true, [](const TrainConfig& c, int) { return Json(c.optim.adamw.beta2); }},
    {"eps", true, [](const TrainConfig& c, int) { return Json(c.optim.adamw.eps); }},
    {"max_grad_norm", true, [](const TrainConfig& c, int) { return Json(c.optim.adamw.max_grad_norm); }},
    {"fp8", true, [](const TrainConfig& c, int) { return Json(fp8_recipe_name(c.parallel.fp8)); }},
    {"objective", true, [](const TrainConfig& c, int) { return Json(objective_name(c.data.objective)); }, true},
    {"beta", true, [](const TrainConfig& c, int) { return Json(c.dpo.beta); }, true},
    {"dpo_loss", true, [](const TrainConfig& c, int) { return Json(dpo_loss_name(c.dpo.loss)); }, true},
    {"label_smoothing", true, [](const TrainConfig& c, int) { return Json(c.dpo.label_smoothing); }, true},
    {"ref_model", true, [](const TrainConfig& c, int) { return Json(c.dpo.ref_model); }, true},
    {"router_aux_loss", true, [](const TrainConfig& c, int) { return Json(c.model.router_aux_loss); }},
};

}  // namespace

Json train_record(const TrainConfig& c, int world) {
  Json record = Json::object();
  for (const RecordedSetting& s : kRecorded) record[s.key] = s.value(c, world);
  return record;
}

std::vector<std::string> refused_changes(const Json& was, const Json& now) {
  std::vector<std::string> out;
  for (const RecordedSetting& s : kRecorded) {
    if (!s.refused || !now.contains(s.key)) continue;
    if (std::string(s.key) != "objective" && now.value("objective", Json()) != "dpo") continue;  // dpo's own
    // A checkpoint from before objectives trained sft.
    const Json before = was.contains(s.key) ? was[s.key] : std::string(s.key) == "objective" ? Json("sft") : Json();
    if (before.is_null() || before == now[s.key]) continue;
    out.push_back(cat(s.key, " ", before.dump(), " -> ", now[s.key].dump()));
  }
  return out;
}

std::vector<std::string> continuation_changes(const Json& was, const Json& now) {
  std::vector<std::string> out;
  for (const RecordedSetting& s : kRecorded) {
    const std::string key = s.key;
    if (!s.compared || s.refused || !was.contains(key) || !now.contains(key) || was[key] == now[key]) continue;
    // The step count shapes only a cosine schedule.
    // `was` is a checkpoint's record, its value of any JSON type.
    if (key == "steps" && was.value("schedule", Json()) == "constant" && now.value("schedule", Json()) == "constant")
      continue;
    out.push_back(cat(key, " ", was[key].dump(), " -> ", now[key].dump()));
  }
  return out;
}

}  // namespace anvil
