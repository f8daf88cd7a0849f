// JSON: nlohmann::json, with readers that name the file and position of a parse error.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace anvil {

using Json = nlohmann::json;

Json json_parse(const std::string& text, const std::string& what);  // what: file name, for errors
Json json_read_file(const std::string& path);
void json_write_file(const std::string& path, const Json& j, int indent = 2);

}  // namespace anvil
