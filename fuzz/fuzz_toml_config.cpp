// Fuzz target: a TOML settings file, read as `anvil train --config FILE.toml` reads it: every
// key a flag of anvil train (the launch flags left out: they are five more flags of the same
// kinds, and bring the launcher along). Beyond clean refusals, the settings a
// file gives must survive the round trip a run makes of them: anvil_config.toml, written by
// to_toml(), read again with --config, gives the same settings back; anything else is a
// finding too (the written file would not repeat the run).
#include <cstdio>

#include "cli/args.h"
#include "cli/config_flags.h"
#include "fuzz_input.h"

namespace {

// train's flags over fresh settings, read from the file at `path`; the settings as TOML.
std::string read_settings(const std::string& path) {
  anvil::TrainConfig c;
  anvil::Args a("train", "");
  a.config("--config");
  anvil::bind_train_flags(a, c);
  std::string flag = "--config", file = path;
  char* argv[] = {flag.data(), file.data()};
  a.parse(2, argv);
  return a.to_toml();
}

void check_round_trip(const std::string& written) {
  std::string again;
  try {
    again = read_settings(anvil::fuzz::write_input("anvil_config.toml", written));
  } catch (const anvil::Error& e) {
    std::fprintf(stderr, "written settings:\n%s\n", written.c_str());
    anvil::fuzz::escaped("a refusal of the settings anvil wrote", e.what());
  }
  if (again != written) {
    std::fprintf(stderr, "written:\n%s\nread back and written again:\n%s\n", written.c_str(), again.c_str());
    anvil::fuzz::escaped("a settings round trip that differs", "to_toml(read(to_toml(x))) != to_toml(x)");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = anvil::fuzz::write_input("settings.toml", data, size);
  std::string written;
  anvil::fuzz::expect_clean([&] { written = read_settings(path); });
  if (!written.empty()) check_round_trip(written);
  return 0;
}
