#include "train/grad.h"

#include "core/error.h"
#include "io/hub.h"
#include "io/safetensors.h"
#include "train/open_run.h"

namespace anvil {

double run_grad(const GradOptions& o) {
  const std::string dir = resolve_model_dir(o.model);
  ModelConfig cfg = load_config(dir);
  if (o.router_aux_loss) {
    ANVIL_ENSURE(cfg.sparse_layers() > 0, kUsage, "--router-aux-loss: ", cfg.architecture,
                 " has no experts (the load-balancing loss is a mixture-of-experts model's)");
    cfg.moe.output_router_logits = true;
  }
  SafetensorsFile tokens(o.tokens);
  const SafeTensorInfo* ids = tokens.find("input_ids");
  ANVIL_ENSURE(ids, kNotFound, o.tokens, ": no tensor input_ids");
  ANVIL_ENSURE(ids->shape.ndim == 2 && ids->shape[1] >= 2, kInvalidInput, o.tokens, ": input_ids has shape ",
               ids->shape.str(), ", expected [B, T] with T >= 2");
  TokenBatch batch;
  batch.ids = read_as_i64(*ids);
  if (const SafeTensorInfo* pos = tokens.find("position_ids")) {
    ANVIL_ENSURE(pos->shape == ids->shape, kInvalidInput, o.tokens, ": position_ids has shape ", pos->shape.str(),
                 ", input_ids ", ids->shape.str(), "; they must match");
    batch.positions = read_as_i64(*pos);
  }

  TrainConfig c;
  c.model.device = o.device;
  c.parallel.mode = ParallelMode::kDdp;
  c.parallel.mlp_tile = o.mlp_tile;
  c.parallel.fp8 = o.fp8;
  c.data.micro_batch = ids->shape[0];
  c.data.seq_len = ids->shape[1];
  ParamTable table(cfg, 1);
  HostUnits w = make_host_units(table);
  load_hf_weights(dir, table, w);
  const std::unique_ptr<Trainer> t = make_trainer(cfg, host_units_reader(w), c, c.data.seq_len, nullptr, 0);
  Trainer& trainer = *t;
  std::vector<float> logits;
  const float loss = static_cast<float>(trainer.loss_and_grads(batch, &logits));
  const HostUnits grads = trainer.grads();

  SafetensorsWriter out;
  out.add("loss", DType::kF32, {1}, &loss);
  out.add("logits", DType::kF32, {c.data.micro_batch, c.data.seq_len, cfg.vocab_size}, logits.data());
  for (const ParamEntry& e : trainer.table().entries())
    out.add("grad." + e.name, DType::kF32, e.shape, grads[static_cast<size_t>(e.unit)].data() + e.offset);
  out.write(o.out);
  return loss;
}

}  // namespace anvil
