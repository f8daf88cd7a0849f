// Command-line flags for one subcommand.
//
// Each subcommand declares its flags against the fields of its options struct, then calls
// parse(). Flags take "--name value" or "--name=value"; a flag may have aliases
// ("-b,--minbytes"). An unknown flag (with the nearest flag when one is a few edits away, or
// the flag holding another trainer's setting: --epochs names --steps), a
// missing or malformed value, or a missing required flag throws a kUsage Error whose one line
// names the command and the flag; the CLI turns it into exit code 2. --help prints the
// generated help, wrapped at 100 columns (one [default: ...] a flag: the help's own when it
// says one), and parse() returns false.
//
// A command that declares config() takes "--config FILE.toml": every other flag may be a
// key of the file, spelled as the flag without its dashes ("seq-len = 2048" or
// "seq_len = 2048"); flags on the command line override the file; an unknown key is an
// error naming the key and the nearest flag as above; a table is refused (the keys stand at the
// file's top level). to_toml() writes the resolved settings back
// in the same form, which --config reads again.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace anvil {

class Args {
 public:
  Args(std::string command, std::string summary);

  Args& flag(const std::string& names, bool* out, const std::string& help);
  // A switch that turns *out off ("--no-shuffle" for shuffle = true); as TOML, !*out.
  Args& flag_off(const std::string& names, bool* out, const std::string& help);
  Args& opt(const std::string& names, std::string* out, const std::string& metavar,
            const std::string& help, bool required = false);
  Args& opt(const std::string& names, int64_t* out, const std::string& metavar,
            const std::string& help, bool required = false);
  Args& opt(const std::string& names, double* out, const std::string& metavar,
            const std::string& help, bool required = false);
  Args& choice(const std::string& names, std::string* out, std::vector<std::string> choices,
               const std::string& help);
  // A choice held in another type (an enum): `set` reads one of `choices`, `get` writes it back.
  Args& choice(const std::string& names, std::vector<std::string> choices, const std::string& help,
               std::function<void(const std::string&)> set, std::function<std::string()> get);
  // Repeatable; each occurrence may also carry several values ("--data a.jsonl b.jsonl").
  Args& list(const std::string& names, std::vector<std::string>* out, const std::string& metavar,
             const std::string& help, bool required = false);
  // --config FILE.toml (see above).
  Args& config(const std::string& names);
  // The flag declared last acts on this invocation only: to_toml() leaves it out, so a run
  // started again from the written settings does not repeat it (--resume PATH, a reset).
  Args& once();
  // Positional arguments (e.g. the collective of `anvil bench all_reduce`).
  Args& positional(const std::string& name, std::string* out, const std::string& help,
                   bool required = true);

  // The last positional may take one or more arguments (e.g. the files of anvil report).
  Args& positional_list(const std::string& name, std::vector<std::string>* out, const std::string& help);

  // argv[0] is the first argument after the subcommand's name.
  bool parse(int argc, char** argv);
  std::string help() const;
  // True when the flag was given on the command line (not left at its default).
  bool given(const std::string& name) const;
  // Every flag's resolved value as TOML (key = the first long name without dashes), one a line;
  // not the once() flags.
  std::string to_toml() const;

 private:
  struct Spec {
    std::vector<std::string> names;
    std::string metavar, help;
    bool takes_value = true, required = false, seen = false, is_list = false;
    std::string default_text;
    std::function<void(const std::string&)> set;
    std::function<std::string()> toml;  // the current value as a TOML literal
  };
  Spec& add(const std::string& names);
  Spec& add(const std::string& names, const std::string& metavar, const std::string& help, bool required);
  // A switch: giving it sets *out to `given`; as TOML, whether *out is `given`.
  Args& add_switch(const std::string& names, bool* out, const std::string& help, bool given);
  Spec* find(const std::string& name);
  const Spec* find_spec(const std::string& name) const;
  // The long flag nearest to `name` within max_distance edits ("" when none is).
  std::string nearest_flag(const std::string& name, size_t max_distance) const;
  std::string other_name(const std::string& name) const;
  std::string near_flag(const std::string& name) const;
  [[noreturn]] void unknown_flag(const std::string& name) const;
  void apply_config_file(const std::string& file);
  [[noreturn]] void usage_error(const std::string& message) const;

  std::string command_, summary_;
  std::vector<Spec> specs_;
  std::vector<Spec> positionals_;
  std::string config_flag_, config_file_;
  std::string context_;  // appended to usage errors while a config file is applied
};

// Parses sizes such as 8, 64K, 4M, 1G (powers of 1024). Throws kUsage naming `what`.
int64_t parse_size(const std::string& text, const std::string& what);

}  // namespace anvil
