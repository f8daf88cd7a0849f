// JSON readers that name the file and position of a parse error (see json.h).
#include "core/json.h"

#include "core/error.h"
#include "core/fs.h"

namespace anvil {

void check_json_depth(std::string_view text, const std::string& what) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // an escaped character, perhaps a quote
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      ANVIL_ENSURE(++depth <= kMaxJsonDepth, kInvalidInput, what, ": JSON nested more than ", kMaxJsonDepth,
                   " levels deep");
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
}

Json json_parse(const std::string& text, const std::string& what) {
  check_json_depth(text, what);
  try {
    return Json::parse(text);
  } catch (const nlohmann::json::exception& e) {  // parse_error, and out_of_range for a number past double
    raise(ErrorKind::kInvalidInput, what, ": not valid JSON (", e.what(), ")");
  }
}

Json json_read_file(const std::string& path) { return json_parse(read_file(path), path); }

void json_write_file(const std::string& path, const Json& j, int indent) {
  write_file_atomic(path, j.dump(indent) + "\n");
}

}  // namespace anvil
