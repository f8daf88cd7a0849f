// JSON readers that name the file and position of a parse error (see json.h).
#include "core/json.h"

#include "core/error.h"
#include "core/fs.h"

namespace anvil {

Json json_parse(const std::string& text, const std::string& what) {
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    raise(ErrorKind::kInvalidInput, what, ": not valid JSON (", e.what(), ")");
  }
}

Json json_read_file(const std::string& path) { return json_parse(read_file(path), path); }

void json_write_file(const std::string& path, const Json& j, int indent) {
  write_file_atomic(path, j.dump(indent) + "\n");
}

}  // namespace anvil
