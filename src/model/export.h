// A model as a Hugging Face model folder: its config.json and its weights by name, handed to
// io/hf_export.h, which writes the folder. anvil export and train --export both call it.
#pragma once

#include "core/json.h"
#include "io/hf_export.h"
#include "model/config.h"
#include "model/params.h"
#include "model/weights.h"

namespace anvil {

// config.json of the model: as it was read, or made from `config` for a model built without one.
Json hf_config_json(const ModelConfig& config);

// Writes a Hugging Face model folder from host units laid out for `table`.
void export_model(const ModelConfig& config, const ParamTable& table, const HostUnits& units,
                  const HfExportSettings& settings);

}  // namespace anvil
