// Moving parameters between Hugging Face safetensors and the flat units of a ParamTable.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/params.h"

namespace anvil {

// Host fp32 copies of every unit (padded length, padding zero).
using HostUnits = std::vector<std::vector<float>>;
HostUnits make_host_units(const ParamTable& table);

// Fills out[0, end - begin) with elements [begin, end) of one unit (padding zero). The
// Trainer loads its parameters through one, unit by unit and each rank only the elements
// it owns, so host memory holds at most one unit's worth beyond what the rank keeps.
using UnitReader = std::function<void(int unit, int64_t begin, int64_t end, float* out)>;
// units (of a table of any world size: elements past a unit's end read as padding, zero) must
// outlive the reader.
UnitReader host_units_reader(const HostUnits& units);
// `to`'s units from `units` laid out by `from`, tensor by tensor by name: another layout of the
// same model (an expert-parallel rank's table and the whole model's, model/params.h). units
// and the tables must outlive the reader; a tensor of `to` that `from` lacks is kInternal.
UnitReader host_units_reader(const HostUnits& units, const ParamTable& from, const ParamTable& to);
// Every tensor of `from` that `to` has, copied by name from from_units into to_units.
void copy_by_name(const ParamTable& from, const HostUnits& from_units, const ParamTable& to, HostUnits& to_units);
// From the model folder's safetensors (mapped; read pages are dropped from this process's
// memory after use). Missing or mis-shaped tensors are errors naming the file and tensor
// (when their unit is read); unused tensors are reported once, here.
UnitReader hf_weights_reader(const std::string& model_dir, const ParamTable& table);

// Reads every parameter of the table from the model folder's safetensors (single file or
// sharded) into host units. Missing or mis-shaped tensors are errors naming the file and
// tensor; tensors the model does not use are reported once as a warning.
void load_hf_weights(const std::string& model_dir, const ParamTable& table, HostUnits& units);

// Initialises as transformers does: linear and embedding weights ~ normal(0,
// initializer_range), norm weights 1, biases 0. Deterministic in the seed.
void init_weights(const ModelConfig& config, const ParamTable& table, uint64_t seed, HostUnits& units);

// Writes model.safetensors (one file) with every parameter under its Hugging Face name, in
// F32 or BF16 (round to nearest even).
void save_hf_weights(const std::string& path, const ParamTable& table, const HostUnits& units, DType dtype);

}  // namespace anvil
