#include "train/grad.h"

#include "core/error.h"
#include "io/hub.h"
#include "io/safetensors.h"
#include "train/open_run.h"

namespace anvil {

namespace {

// --objective dpo: the labels, each row's pair (its first two documents) and the reference
// log-probs of the tokens file.
void read_pairs(const SafetensorsFile& tokens, const std::string& file, int64_t rows, int64_t seq, TokenBatch& batch,
                std::vector<double>& ref_chosen, std::vector<double>& ref_rejected) {
  const SafeTensorInfo* labels = tokens.find("labels");
  const SafeTensorInfo* rc = tokens.find("ref_chosen_logps");
  const SafeTensorInfo* rr = tokens.find("ref_rejected_logps");
  ANVIL_ENSURE(labels && rc && rr && !batch.positions.empty(), kNotFound, file,
               ": --objective dpo needs labels, position_ids, ref_chosen_logps and ref_rejected_logps");
  ANVIL_ENSURE(labels->shape[0] == rows && labels->shape[1] == seq && rc->shape.numel() == rows &&
                   rr->shape.numel() == rows,
               kInvalidInput, file, ": labels [B, T] and the reference log-probs [B] must match input_ids");
  batch.labels = read_as_i64(*labels);
  ref_chosen = read_as_f64(*rc);
  ref_rejected = read_as_f64(*rr);
  for (int64_t k = 0; k < rows; ++k) {
    std::vector<int64_t> starts;
    for (int64_t t = 0; t < seq; ++t)
      if (batch.positions[static_cast<size_t>(k * seq + t)] == 0) starts.push_back(t);
    starts.push_back(seq);
    ANVIL_ENSURE(starts.size() >= 3, kInvalidInput, file, ": row ", k, " holds fewer than two documents");
    batch.pairs.push_back({k, k * seq, starts[1], k * seq + starts[1], starts[2] - starts[1]});
  }
}

}  // namespace

double run_grad(const GradOptions& o) {
  const std::string dir = resolve_model_dir(o.model);
  ModelConfig cfg = load_config(dir);
  if (o.router_aux_loss) add_router_aux_loss(cfg, dir);
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

  std::vector<double> ref_chosen, ref_rejected;
  const bool dpo = o.objective == Objective::kDpo;
  if (dpo) read_pairs(tokens, o.tokens, ids->shape[0], ids->shape[1], batch, ref_chosen, ref_rejected);

  TrainConfig c;
  c.data.objective = o.objective;
  c.dpo = o.dpo;
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
  SafetensorsWriter out;
  std::vector<float> logits;
  std::vector<double> logps_chosen, logps_rejected;
  if (dpo) {
    trainer.set_reference(ref_chosen, ref_rejected);
    for (const PairLogps& p : trainer.pair_logps(batch)) {
      logps_chosen.push_back(p.chosen);
      logps_rejected.push_back(p.rejected);
    }
    out.add("logps_chosen", DType::kF64, {ids->shape[0]}, logps_chosen.data());
    out.add("logps_rejected", DType::kF64, {ids->shape[0]}, logps_rejected.data());
  }
  const float loss = static_cast<float>(trainer.loss_and_grads(batch, dpo ? nullptr : &logits));
  const HostUnits grads = trainer.grads();
  out.add("loss", DType::kF32, {1}, &loss);
  if (!dpo) out.add("logits", DType::kF32, {c.data.micro_batch, c.data.seq_len, cfg.vocab_size}, logits.data());
  for (const ParamEntry& e : trainer.table().entries())
    out.add("grad." + e.name, DType::kF32, e.shape, grads[static_cast<size_t>(e.unit)].data() + e.offset);
  out.write(o.out);
  return loss;
}

}  // namespace anvil
