// bin/anvil of the wheel (pip install .): runs the real binary, which the wheel puts in its
// package folder, site-packages/anvil/bin/anvil, beside NVIDIA's pip libraries that the
// binary's RUNPATH finds relative to itself (CMakeLists.txt, docs/building.md). This launcher
// sits in the scripts folder of the same installation, whose site-packages folder carries the
// Python version in its name (lib/python3.12/site-packages; dist-packages on Debian's system
// Python), so the launcher looks it up beside itself; pip install --target puts the scripts
// in <target>/bin and the package in <target>/anvil. It replaces itself with the binary
// (execv): the arguments, the exit code and the signals are the binary's own.
#include <glob.h>
#include <limits.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace {

// The folder that holds this launcher, symlinks resolved (pipx links ~/.local/bin/anvil here).
std::string own_folder() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  const std::string path(buf, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/'));
}

// The binary of this installation; with two Pythons of one prefix holding the wheel, the
// first in glob's (sorted) order. Empty where there is none.
std::string find_binary(const std::string& bin) {
  const std::string target = bin + "/../anvil/bin/anvil";
  if (::access(target.c_str(), X_OK) == 0) return target;
  const std::string pattern = bin + "/../lib/python3*/*-packages/anvil/bin/anvil";
  glob_t found{};
  std::string binary;
  if (::glob(pattern.c_str(), 0, nullptr, &found) == 0) {
    for (size_t i = 0; i < found.gl_pathc && binary.empty(); ++i)
      if (::access(found.gl_pathv[i], X_OK) == 0) binary = found.gl_pathv[i];
  }
  ::globfree(&found);
  return binary;
}

}  // namespace

int main(int, char** argv) {
  const std::string bin = own_folder();
  const std::string binary = find_binary(bin);
  if (binary.empty()) {
    std::fprintf(stderr,
                 "anvil: the anvil binary of this installation is missing: looked for "
                 "%s/../lib/python3*/*-packages/anvil/bin/anvil (reinstall the wheel: "
                 "pip install --force-reinstall anvil-*.whl)\n",
                 bin.c_str());
    return 127;
  }
  ::execv(binary.c_str(), argv);
  std::fprintf(stderr, "anvil: cannot run %s: %s\n", binary.c_str(), std::strerror(errno));
  return 126;
}
