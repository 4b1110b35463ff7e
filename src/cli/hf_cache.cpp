#include "src/cli/hf_cache.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <vector>

namespace tiergen::cli {

namespace fs = std::filesystem;

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

bool has_config(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "config.json", ec);
}

}  // namespace

bool looks_like_hub_id(const std::string& name) {
  const size_t slash = name.find('/');
  return slash != std::string::npos && slash > 0 && slash + 1 < name.size() && name.find('/', slash + 1) == std::string::npos &&
         name[0] != '.' && name.find("..") == std::string::npos;
}

std::string hugging_face_hub_dir() {
  if (const std::string hub = env("HF_HUB_CACHE"); !hub.empty()) return hub;
  if (const std::string home = env("HF_HOME"); !home.empty()) return home + "/hub";
  if (const std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) return xdg + "/huggingface/hub";
  if (const std::string home = env("HOME"); !home.empty()) return home + "/.cache/huggingface/hub";
  return "";
}

std::optional<std::string> find_in_hugging_face_cache(const std::string& hub_id) {
  const std::string hub = hugging_face_hub_dir();
  if (hub.empty() || !looks_like_hub_id(hub_id)) return std::nullopt;
  std::string folder = "models--" + hub_id;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path repo = fs::path(hub) / folder;
  std::ifstream ref(repo / "refs" / "main");
  std::string hash;
  if (ref >> hash) {
    const fs::path snapshot = repo / "snapshots" / hash;
    if (has_config(snapshot)) return snapshot.string();
  }
  // No refs/main (a download of another revision): the one snapshot there is, if one.
  std::error_code ec;
  std::vector<fs::path> snapshots;
  for (fs::directory_iterator it(repo / "snapshots", ec), end; !ec && it != end; it.increment(ec)) {
    if (it->is_directory(ec) && has_config(it->path())) snapshots.push_back(it->path());
  }
  if (snapshots.size() == 1) return snapshots.front().string();
  return std::nullopt;
}

}  // namespace tiergen::cli
