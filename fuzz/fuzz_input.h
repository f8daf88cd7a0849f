// What every fuzz target shares: the input handed to anvil as a file (its readers take paths,
// as they do for a downloaded file), and the rule of the verdict. anvil::Error is anvil's
// answer to a bad file, so a target swallows it; any other exception (a JSON type error, a
// bad_alloc from an absurd length, std::out_of_range) escaped the reader's checks and aborts
// the run, naming its type and message, so that libFuzzer keeps the input as a crash.
// Sanitizer reports, crashes and hangs are findings without help.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <typeinfo>

#include "core/error.h"

namespace anvil::fuzz {

// A folder of this process's own (under /dev/shm where there is one: no disk write per input).
const std::string& scratch_dir();
// Writes data to scratch_dir()/name (replacing it) and returns the path.
std::string write_input(const std::string& name, const uint8_t* data, size_t size);
std::string write_input(const std::string& name, const std::string& text);
// Aborts, printing what escaped: its type (mangled, as typeid names it) and message.
[[noreturn]] void escaped(const char* type, const char* what);
// A folder of files the targets read (fuzz/fixtures): ANVIL_FUZZ_FIXTURES, else the source
// tree's, as the build recorded it.
std::string fixture_path(const std::string& name);

// Runs f: an anvil::Error is a clean refusal; anything else is a finding.
template <class F>
void expect_clean(F&& f) {
  try {
    f();
  } catch (const Error&) {
  } catch (const std::exception& e) {
    escaped(typeid(e).name(), e.what());
  } catch (...) {
    escaped("a non-std exception", "");
  }
}

}  // namespace anvil::fuzz
