#include "cli/args.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace anvil {
namespace {

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::stringstream s(names);
  std::string item;
  while (std::getline(s, item, ',')) out.push_back(item);
  return out;
}

std::string toml_string(const std::string& v) {
  std::string out = "\"";
  for (const unsigned char c : v) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7f) {
      char esc[8];
      std::snprintf(esc, sizeof esc, "\\u%04x", c);
      out += esc;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

// The shortest text that reads back as the same double (a TOML float: with a '.' or 'e').
std::string shortest(double x) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  std::string s(buf, r.ptr);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

// The columns --help wraps at, and where a one-line flag's help starts.
constexpr size_t kHelpColumns = 100;
constexpr size_t kHelpIndent = 30;

// Joins the words of a phrase that wrapping keeps on one line ("[default: 0]").
constexpr char kUnbroken = '\x1f';

// `text` wrapped at kHelpColumns between words, each line after `indent` spaces; the text's own
// line breaks kept. A word longer than a line stands alone on one.
std::string wrapped(const std::string& text, size_t indent) {
  std::string out;
  std::stringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    std::stringstream words(line);
    std::string word, row;
    while (words >> word) {
      if (!row.empty() && indent + row.size() + 1 + word.size() > kHelpColumns) {
        out += std::string(indent, ' ') + row + "\n";
        row.clear();
      }
      row += (row.empty() ? "" : " ") + word;
    }
    out += std::string(indent, ' ') + row + "\n";
  }
  std::replace(out.begin(), out.end(), kUnbroken, ' ');
  return out;
}

// A key of a config file as a flag: "seq_len" and "seq-len" are "--seq-len".
std::string key_flag(const std::string& key) {
  std::string f = "--" + key;
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

// Settings other trainers (Hugging Face's TrainingArguments, TRL) name otherwise: the flag that
// holds the setting here, and what to say.
struct OtherName {
  const char* name;
  const char* flag;
  const char* say;
};
constexpr OtherName kOtherNames[] = {
    {"--epochs", "--steps", "--steps N counts optimizer steps; anvil has no epochs"},
    {"--num-train-epochs", "--steps", "--steps N counts optimizer steps; anvil has no epochs"},
    {"--max-steps", "--steps", "--steps N counts optimizer steps"},
    {"--per-device-train-batch-size", "--micro-batch", "--micro-batch B: sequences per micro-batch and GPU"},
    {"--batch", "--micro-batch",
     "--micro-batch B: sequences per micro-batch and GPU; --batch is generate's prompts at once"},
    {"--batch-size", "--micro-batch", "--micro-batch B: sequences per micro-batch and GPU"},
    {"--gradient-accumulation-steps", "--grad-accum", "--grad-accum K: micro-batches per optimizer step"},
    {"--max-seq-length", "--seq-len", "--seq-len T: tokens per sequence"},
    {"--max-length", "--seq-len", "--seq-len T: tokens per sequence"},
    {"--warmup-steps", "--warmup", "--warmup N: linear warm-up steps"},
};

}  // namespace

Args::Args(std::string command, std::string summary)
    : command_(std::move(command)), summary_(std::move(summary)) {}

void Args::usage_error(const std::string& message) const {
  raise(ErrorKind::kUsage, "anvil ", command_, ": ", message, context_, " (see anvil ", command_, " --help)");
}

// A mistyped flag names the command's flag nearest to it by edit distance, when one is near:
// within a third of its length (at least 2 edits).
void Args::unknown_flag(const std::string& name) const {
  const std::string other = other_name(name), nearest = near_flag(name);
  if (!other.empty()) usage_error(cat("unknown flag ", name, " (", other, ")"));
  if (nearest.empty()) usage_error(cat("unknown flag ", name));
  raise(ErrorKind::kUsage, "anvil ", command_, ": unknown flag ", name, " (did you mean ", nearest, "? see anvil ",
        command_, " --help)");
}

// What this command calls another trainer's setting `name`, or "".
std::string Args::other_name(const std::string& name) const {
  for (const OtherName& o : kOtherNames)
    if (name == o.name && find_spec(o.flag)) return o.say;
  return "";
}

// A flag of this command a few edits from `name` (a third of its length, at least 2), or "".
std::string Args::near_flag(const std::string& name) const {
  return nearest_flag(name, std::max<size_t>(2, name.size() / 3));
}

Args::Spec& Args::add(const std::string& names) {
  specs_.push_back(Spec{});
  specs_.back().names = split_names(names);
  return specs_.back();
}

Args::Spec& Args::add(const std::string& names, const std::string& metavar, const std::string& help, bool required) {
  Spec& s = add(names);
  s.metavar = metavar;
  s.help = help;
  s.required = required;
  return s;
}

std::string Args::nearest_flag(const std::string& name, size_t max_distance) const {
  std::string nearest;
  size_t best = SIZE_MAX;
  for (const Spec& c : specs_)
    for (const std::string& n : c.names) {
      if (n.rfind("--", 0) != 0 || n == config_flag_) continue;
      const size_t d = edit_distance(name, n);
      if (d <= max_distance && d < best) best = d, nearest = n;
    }
  return nearest;
}

const Args::Spec* Args::find_spec(const std::string& name) const {
  for (const auto& s : specs_)
    for (const auto& n : s.names)
      if (n == name) return &s;
  return nullptr;
}

Args::Spec* Args::find(const std::string& name) {
  for (auto& s : specs_)
    for (auto& n : s.names)
      if (n == name) return &s;
  return nullptr;
}

Args& Args::flag(const std::string& names, bool* out, const std::string& help) {
  return add_switch(names, out, help, true);
}

Args& Args::once() {
  if (!specs_.empty()) specs_.back().toml = nullptr;
  return *this;
}

Args& Args::flag_off(const std::string& names, bool* out, const std::string& help) {
  return add_switch(names, out, help, false);
}

Args& Args::add_switch(const std::string& names, bool* out, const std::string& help, bool given) {
  Spec& s = add(names, "", help, false);
  s.takes_value = false;
  s.set = [out, given](const std::string&) { *out = given; };
  s.toml = [out, given] { return std::string(*out == given ? "true" : "false"); };
  return *this;
}

Args& Args::opt(const std::string& names, std::string* out, const std::string& metavar,
                const std::string& help, bool required) {
  Spec& s = add(names, metavar, help, required);
  s.default_text = *out;
  s.set = [out](const std::string& v) { *out = v; };
  s.toml = [out] { return toml_string(*out); };
  return *this;
}

Args& Args::opt(const std::string& names, int64_t* out, const std::string& metavar,
                const std::string& help, bool required) {
  Spec& s = add(names, metavar, help, required);
  s.default_text = std::to_string(*out);
  const std::string flag = s.names.back();
  s.set = [this, out, flag](const std::string& v) {
    errno = 0;
    char* end = nullptr;
    long long x = std::strtoll(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || errno == ERANGE)
      usage_error(cat(flag, " expects an integer, got '", v, "'"));
    *out = x;
  };
  s.toml = [out] { return std::to_string(*out); };
  return *this;
}

Args& Args::opt(const std::string& names, double* out, const std::string& metavar,
                const std::string& help, bool required) {
  Spec& s = add(names, metavar, help, required);
  std::ostringstream d;
  d << *out;
  s.default_text = d.str();
  const std::string flag = s.names.back();
  s.set = [this, out, flag](const std::string& v) {
    errno = 0;
    char* end = nullptr;
    double x = std::strtod(v.c_str(), &end);
    if (v.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(x))
      usage_error(cat(flag, " expects a number, got '", v, "'"));
    *out = x;
  };
  s.toml = [out] { return shortest(*out); };
  return *this;
}

Args& Args::choice(const std::string& names, std::string* out, std::vector<std::string> choices,
                   const std::string& help) {
  return choice(names, std::move(choices), help, [out](const std::string& v) { *out = v; }, [out] { return *out; });
}

Args& Args::choice(const std::string& names, std::vector<std::string> choices, const std::string& help,
                   std::function<void(const std::string&)> set, std::function<std::string()> get) {
  std::string joined;
  for (auto& c : choices) joined += (joined.empty() ? "" : "|") + c;
  Spec& s = add(names, joined, help, false);
  s.default_text = get();
  const std::string flag = s.names.back();
  s.set = [this, set, flag, choices, joined](const std::string& v) {
    if (std::find(choices.begin(), choices.end(), v) == choices.end())
      usage_error(cat(flag, " must be one of ", joined, ", got '", v, "'"));
    set(v);
  };
  s.toml = [get] { return toml_string(get()); };
  return *this;
}

Args& Args::list(const std::string& names, std::vector<std::string>* out, const std::string& metavar,
                 const std::string& help, bool required) {
  Spec& s = add(names, metavar, help, required);
  s.is_list = true;
  s.set = [out](const std::string& v) { out->push_back(v); };
  s.toml = [out] {
    std::string a = "[";
    for (const std::string& v : *out) a += (a.size() > 1 ? ", " : "") + toml_string(v);
    return a + "]";
  };
  return *this;
}

Args& Args::config(const std::string& names) {
  Spec& s = add(names);
  s.metavar = "FILE.toml";
  s.help = "read flags from a TOML file: keys are flags without dashes (seq-len = 2048 or seq_len = 2048); "
           "flags on the command line win";
  config_flag_ = s.names.back();
  s.set = [this](const std::string& v) { config_file_ = v; };
  return *this;
}

void Args::apply_config_file(const std::string& file) {
  toml::table table;
  try {
    table = toml::parse_file(file);
  } catch (const toml::parse_error& e) {
    const toml::source_region& at = e.source();
    if (at.begin.line == 0) usage_error(cat(file, ": ", e.description()));
    usage_error(cat(file, ":", at.begin.line, ":", at.begin.column, ": ", e.description()));
  }
  for (auto&& [k, node] : table) {
    const std::string key(k.str()), name = key_flag(key);
    Spec* s = find(name);
    // The keys are flags at the file's top level, in no table (section): a table whose keys are
    // flags names them to move.
    if (const toml::table* t = node.as_table()) {
      std::string flags;
      for (auto&& [tk, tnode] : *t)
        if (find(key_flag(std::string(tk.str())))) flags += (flags.empty() ? "" : ", ") + std::string(tk.str());
      usage_error(cat(file, ": unknown table [", key, "]: the file holds flags as top-level keys, in no table",
                      flags.empty() ? std::string() : cat("; move ", flags, " above [", key, "]")));
    }
    if (!s || name == config_flag_) {
      const std::string other = other_name(name), nearest = near_flag(name);
      usage_error(cat(file, ": unknown key '", key, "'",
                      !other.empty()     ? cat(" (", other, ")")
                      : nearest.empty() ? std::string()
                                        : cat(" (nearest flag: ", nearest, ")")));
    }
    if (s->seen) continue;  // the command line wins
    context_ = cat(" (key '", key, "' of ", file, ")");
    auto text = [&](const toml::node& n) -> std::string {
      if (const auto* v = n.as_string()) return v->get();
      if (const auto* v = n.as_integer()) return std::to_string(v->get());
      if (const auto* v = n.as_floating_point()) return shortest(v->get());
      usage_error(cat(name, " expects ", s->metavar.empty() ? "a value" : s->metavar, ", got a TOML ",
                      n.type() == toml::node_type::boolean ? "boolean" : "table or array"));
    };
    if (!s->takes_value) {
      const auto* b = node.as_boolean();
      if (!b) usage_error(cat(name, " is a switch: expects true or false"));
      if (b->get()) s->set("");
    } else if (const auto* arr = node.as_array(); arr && s->is_list) {
      for (const toml::node& item : *arr) s->set(text(item));
    } else {
      s->set(text(node));
    }
    s->seen = true;
    context_.clear();
  }
}

std::string Args::to_toml() const {
  std::string out;
  for (const Spec& s : specs_) {
    if (!s.toml) continue;
    auto it = std::find_if(s.names.begin(), s.names.end(), [](const std::string& n) { return n.rfind("--", 0) == 0; });
    if (it == s.names.end()) continue;
    out += it->substr(2) + " = " + s.toml() + "\n";
  }
  return out;
}

Args& Args::positional(const std::string& name, std::string* out, const std::string& help,
                       bool required) {
  Spec s;
  s.names = {name};
  s.help = help;
  s.required = required;
  s.set = [out](const std::string& v) { *out = v; };
  positionals_.push_back(s);
  return *this;
}

Args& Args::positional_list(const std::string& name, std::vector<std::string>* out, const std::string& help) {
  Spec s;
  s.names = {name + "..."};
  s.help = help;
  s.required = true;
  s.is_list = true;
  s.set = [out](const std::string& v) { out->push_back(v); };
  positionals_.push_back(s);
  return *this;
}

bool Args::given(const std::string& name) const {
  for (auto& s : specs_)
    for (auto& n : s.names)
      if (n == name) return s.seen;
  return false;
}

bool Args::parse(int argc, char** argv) {
  size_t next_positional = 0;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(help().c_str(), stdout);
      return false;
    }
    if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) || a[1] == '.'))) {
      std::string name = a, value;
      bool inline_value = false;
      if (auto eq = a.find('='); eq != std::string::npos) {
        name = a.substr(0, eq);
        value = a.substr(eq + 1);
        inline_value = true;
      }
      Spec* s = find(name);
      if (!s) unknown_flag(name);
      if (!s->takes_value) {
        if (inline_value) usage_error(cat(name, " takes no value"));
        s->set("");
        s->seen = true;
        continue;
      }
      if (!inline_value) {
        if (i + 1 >= argc) usage_error(cat(name, " needs a value (", s->metavar, ")"));
        value = argv[++i];
      }
      s->set(value);
      s->seen = true;
      // A list flag takes every following value up to the next flag.
      while (s->is_list && !inline_value && i + 1 < argc && argv[i + 1][0] != '-') s->set(argv[++i]);
      continue;
    }
    if (next_positional >= positionals_.size()) usage_error(cat("unexpected argument '", a, "'"));
    positionals_[next_positional].set(a);
    positionals_[next_positional].seen = true;
    if (!positionals_[next_positional].is_list) ++next_positional;
  }
  if (!config_file_.empty()) apply_config_file(config_file_);
  for (auto& p : positionals_)
    if (p.required && !p.seen) usage_error(cat("missing argument ", p.names[0]));
  for (auto& s : specs_)
    if (s.required && !s.seen) usage_error(cat("missing required flag ", s.names.back()));
  return true;
}

std::string Args::help() const {
  std::ostringstream h;
  h << "usage: anvil " << command_;
  for (auto& p : positionals_) h << (p.required ? " " : " [") << p.names[0] << (p.required ? "" : "]");
  h << " [flags]\n\n" << wrapped(summary_, 0);
  if (!positionals_.empty()) {
    h << "\narguments:\n";
    for (auto& p : positionals_) h << "  " << p.names[0] << "\n" << wrapped(p.help, 6);
  }
  h << "\nflags:\n";
  // A flag whose help fits beside it on one line takes one line, its help at kHelpIndent;
  // any other has its help wrapped under it.
  auto flag_help = [&h](const std::string& head, const std::string& text) {
    std::string flat = text;
    std::replace(flat.begin(), flat.end(), kUnbroken, ' ');
    if (head.size() + 2 <= kHelpIndent && flat.find('\n') == std::string::npos &&
        kHelpIndent + flat.size() <= kHelpColumns)
      h << head << std::string(kHelpIndent - head.size(), ' ') << flat << "\n";
    else
      h << head << "\n" << wrapped(text, 6);
  };
  for (auto& s : specs_) {
    std::string head = " ";
    for (auto& n : s.names) head += (head.size() == 1 ? " " : ", ") + n;
    if (s.takes_value) head += " " + s.metavar;
    std::string text = s.help;
    if (s.required) text += " (required)";
    else if (s.takes_value && !s.default_text.empty() && !s.is_list && s.help.find("[default:") == std::string::npos)
      text += " [default: " + s.default_text + "]";
    std::replace(text.begin() + static_cast<std::ptrdiff_t>(s.help.size()), text.end(), ' ', kUnbroken);
    flag_help(head, text);
  }
  flag_help("  -h, --help", "show this help");
  return h.str();
}

int64_t parse_size(const std::string& text, const std::string& what) {
  if (text.empty()) raise(ErrorKind::kUsage, what, " expects a size such as 8, 64K, 4M or 1G");
  char* end = nullptr;
  errno = 0;
  long long v = std::strtoll(text.c_str(), &end, 10);
  int64_t mult = 1;
  std::string suffix = end;
  if (suffix == "K" || suffix == "k") mult = 1LL << 10;
  else if (suffix == "M" || suffix == "m") mult = 1LL << 20;
  else if (suffix == "G" || suffix == "g") mult = 1LL << 30;
  else if (!suffix.empty() || end == text.c_str() || v < 0 || errno == ERANGE)
    raise(ErrorKind::kUsage, what, " expects a size such as 8, 64K, 4M or 1G, got '", text, "'");
  return v * mult;
}

}  // namespace anvil
