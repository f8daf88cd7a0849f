// Resolving hub ids in the local Hugging Face cache (see hub.h).
#include "io/hub.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/env.h"
#include "core/error.h"
#include "core/fs.h"

namespace anvil {

namespace {

std::vector<std::string> hub_caches() {
  std::vector<std::string> caches;
  if (std::string c = env_str("HF_HUB_CACHE", ""); !c.empty()) caches.push_back(c);
  if (std::string h = env_str("HF_HOME", ""); !h.empty()) caches.push_back(path_join(h, "hub"));
  if (std::string home = env_str("HOME", ""); !home.empty()) caches.push_back(path_join(home, ".cache/huggingface/hub"));
  return caches;
}

// The snapshot of <kind>s--ORG--NAME in the first cache holding one: refs/main when it
// names a snapshot, else the most recently written snapshot; "" when none.
std::string find_snapshot(const std::string& kind, const std::string& id, std::string* looked) {
  std::string repo = kind + "s--" + id;
  repo.replace(repo.find('/'), 1, "--");
  for (const std::string& cache : hub_caches()) {
    const std::string root = path_join(cache, repo);
    *looked += (looked->empty() ? "" : ", ") + root;
    if (!is_directory(root)) continue;
    const std::string ref = path_join(root, "refs/main");
    if (path_exists(ref)) {
      std::string commit = read_file(ref);
      while (!commit.empty() && (commit.back() == '\n' || commit.back() == ' ')) commit.pop_back();
      const std::string snap = path_join(root, "snapshots/" + commit);
      if (is_directory(snap)) return snap;
    }
    std::error_code ec;
    std::string best;
    std::filesystem::file_time_type best_time{};
    for (auto& e : std::filesystem::directory_iterator(path_join(root, "snapshots"), ec)) {
      if (!e.is_directory()) continue;
      auto t = e.last_write_time(ec);
      if (best.empty() || t > best_time) {
        best = e.path().string();
        best_time = t;
      }
    }
    if (!best.empty()) return best;
  }
  return "";
}

}  // namespace

bool looks_like_hub_id(const std::string& spec) {
  return !spec.empty() && spec.find('/') != std::string::npos && spec.front() != '/' && spec.front() != '.' &&
         spec.back() != '/' && std::count(spec.begin(), spec.end(), '/') == 1;
}

std::string resolve_model_dir(const std::string& spec) {
  if (is_directory(spec)) return spec;
  ANVIL_ENSURE(looks_like_hub_id(spec), kNotFound, "model ", spec, ": no such folder");
  std::string looked;
  if (std::string snap = find_snapshot("model", spec, &looked); !snap.empty()) return snap;
  raise(ErrorKind::kNotFound, "model ", spec, " is neither a folder nor in the local Hugging Face cache (looked in ",
        looked.empty() ? std::string(kNoHubCache) : looked,
        "); anvil downloads nothing: fetch it first, e.g. with `huggingface-cli download ", spec, "`");
}

std::string find_dataset_snapshot(const std::string& id, std::string* looked) {
  return find_snapshot("dataset", id, looked);
}

}  // namespace anvil
