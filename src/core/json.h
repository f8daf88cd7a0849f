// JSON: nlohmann::json, with readers that name the file and position of a parse error.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace anvil {

using Json = nlohmann::json;

// The deepest nesting of arrays and objects a document may have. nlohmann::json copies and
// frees nested values recursively, as anvil walks them, so a deeper one would overflow the
// stack; Python's json stops near 1000 levels too (RecursionError).
constexpr int kMaxJsonDepth = 1000;
// Throws kInvalidInput naming `what` when text nests deeper than kMaxJsonDepth (checked on the
// text, before a parser builds the nested values).
void check_json_depth(std::string_view text, const std::string& what);

Json json_parse(const std::string& text, const std::string& what);  // what: file name, for errors
Json json_read_file(const std::string& path);
void json_write_file(const std::string& path, const Json& j, int indent = 2);

}  // namespace anvil
