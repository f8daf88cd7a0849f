// The run's config tree: see train/config.h.
#include "train/config.h"

namespace anvil {

Json train_record(const TrainConfig& c, int world) {
  const DataSection& d = c.data;
  const ScheduleConfig& s = c.optim.schedule;
  const OptimizerConfig& a = c.optim.adamw;
  return {{"data", d.source}, {"seed", c.seed}, {"shuffle", d.shuffle}, {"steps", c.steps},
          {"micro_batch", d.micro_batch}, {"grad_accum", d.grad_accum},
          {"global_batch", d.micro_batch * d.grad_accum * world / c.parallel.context_parallel},
          {"seq_len", d.seq_len}, {"lr", s.lr},
          {"warmup", s.warmup_steps}, {"schedule", s.decay}, {"lr_min", s.lr_min},
          {"weight_decay", a.weight_decay}, {"beta1", a.beta1}, {"beta2", a.beta2}, {"eps", a.eps},
          {"max_grad_norm", a.max_grad_norm}, {"assistant_only_loss", d.assistant_only_loss},
          {"fp8", fp8_recipe_name(c.parallel.fp8)}};
}

}  // namespace anvil
