// Tokenizer::Impl, the tokenizer's state, shared by its two halves: tokenizer_load.cpp builds it
// from a tokenizer.json, tokenizer.cpp encodes and decodes with it. Read only after the load.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "data/added_tokens.h"
#include "data/bpe.h"
#include "data/pre_tokenizer.h"
#include "data/tokenizer.h"

namespace anvil {

struct Tokenizer::Impl {
  std::string what;
  std::string hash;

  std::vector<int> normalizer_options;  // utf8proc option sets, applied in order
  PreTokenizer pre_tokenizer;

  BpeModel bpe;  // the model: ids <-> raw bytes, merges
  std::vector<bool> id_used;

  std::vector<AddedToken> added;
  std::unordered_map<int32_t, int32_t> added_by_id;  // id -> index in added
  std::vector<std::string> added_decoded;            // index -> bytes through the decoder
  AddedMatcher raw_matcher, normalized_matcher;
  std::unordered_map<std::string, int32_t> added_by_content;

  std::string normalize(std::string_view s) const;
};

}  // namespace anvil
