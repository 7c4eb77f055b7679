#include "io/hf_cache.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "base/file.h"

namespace vls {
namespace {

namespace fs = std::filesystem;

bool IsNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
         c == '_' || c == '-';
}

// Org or Name: 1..96 name characters, not starting with '.' or '-', no "..".
bool IsValidPart(const std::string& s) {
  if (s.empty() || s.size() > 96 || s[0] == '.' || s[0] == '-') return false;
  if (s.find("..") != std::string::npos) return false;
  for (char c : s) {
    if (!IsNameChar(c)) return false;
  }
  return true;
}

bool IsValidRevision(const std::string& s) {
  if (s.empty() || s.size() > 256 || s[0] == '/' || s[0] == '.') return false;
  if (s.find("..") != std::string::npos || s.find("//") != std::string::npos) return false;
  for (char c : s) {
    if (!IsNameChar(c) && c != '/') return false;
  }
  return true;
}

bool IsHex(const std::string& s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return !s.empty();
}

bool IsDir(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec);
}

// The snapshot folder `repo_dir` holds for `revision`, or a reason it holds none.
StatusOr<std::string> SnapshotOf(const std::string& repo_dir, const std::string& revision) {
  const std::string snapshots = JoinPath(repo_dir, "snapshots");
  const std::string ref_file = JoinPath(JoinPath(repo_dir, "refs"), revision);
  std::error_code ec;
  std::string commit;
  if (fs::is_regular_file(ref_file, ec)) {
    VLS_ASSIGN_OR_RETURN(commit, ReadFileAtMost(ref_file, 256));
    while (!commit.empty() &&
           (commit.back() == '\n' || commit.back() == '\r' || commit.back() == ' ')) {
      commit.pop_back();
    }
    if (!IsHex(commit)) {
      return DataLoss(ref_file + " does not hold a commit hash");
    }
  } else {
    // No such ref: a commit (prefix) named directly, or the only snapshot there is.
    std::vector<std::string> found;
    for (fs::directory_iterator it(snapshots, ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (IsDir(it->path().string()) &&
          (IsHex(revision) && revision.size() >= 7 ? name.rfind(revision, 0) == 0 : true)) {
        found.push_back(name);
      }
    }
    if (IsHex(revision) && revision.size() >= 7) {
      if (found.empty()) return NotFound("no snapshot starts with " + revision);
      commit = found[0];
    } else if (found.size() == 1 && revision == "main") {
      commit = found[0];
    } else {
      return NotFound("no refs/" + revision + " file" +
                      (found.empty()
                           ? ", no snapshots"
                           : " and " + std::to_string(found.size()) + " snapshots to choose from"));
    }
  }
  const std::string dir = JoinPath(snapshots, commit);
  if (!IsDir(dir)) return NotFound("snapshots/" + commit + " (named by refs) is missing");
  if (!fs::exists(JoinPath(dir, "config.json"), ec)) {
    return NotFound("snapshots/" + commit +
                    " has no config.json (an incomplete download? fetch the whole repository)");
  }
  return dir;
}

}  // namespace

StatusOr<HfRepoRef> ParseHfRepoId(const std::string& ref) {
  HfRepoRef r;
  std::string id = ref;
  if (const size_t at = id.find('@'); at != std::string::npos) {
    r.revision = id.substr(at + 1);
    id = id.substr(0, at);
    if (!IsValidRevision(r.revision)) {
      return InvalidArgument("'" + ref + "': '" + r.revision + "' is not a valid revision");
    }
  } else {
    r.revision = "main";
  }
  const size_t slash = id.find('/');
  if (slash == std::string::npos || id.find('/', slash + 1) != std::string::npos) {
    return InvalidArgument("'" + ref + "' is not a repository id of the form Org/Name");
  }
  r.org = id.substr(0, slash);
  r.name = id.substr(slash + 1);
  if (!IsValidPart(r.org) || !IsValidPart(r.name)) {
    return InvalidArgument("'" + ref +
                           "' is not a repository id: Org and Name are letters, digits, '.', "
                           "'_' and '-'");
  }
  return r;
}

std::vector<std::string> HfCacheDirs(const std::function<const char*(const char*)>& getenv) {
  auto env = [&](const char* name) -> std::string {
    const char* v = getenv ? getenv(name) : std::getenv(name);  // NOLINT(concurrency-mt-unsafe)
    return v == nullptr ? std::string() : std::string(v);
  };
  std::vector<std::string> dirs;
  auto add = [&dirs](const std::string& d) {
    if (d.empty()) return;
    for (const std::string& x : dirs) {
      if (x == d) return;
    }
    dirs.push_back(d);
  };
  add(env("HF_HUB_CACHE"));
  add(env("HUGGINGFACE_HUB_CACHE"));
  if (const std::string home = env("HF_HOME"); !home.empty()) add(JoinPath(home, "hub"));
  if (const std::string xdg = env("XDG_CACHE_HOME"); !xdg.empty()) {
    add(JoinPath(xdg, "huggingface/hub"));
  }
  if (const std::string home = env("HOME"); !home.empty()) {
    add(JoinPath(home, ".cache/huggingface/hub"));
  }
  return dirs;
}

StatusOr<std::string> ResolveHfRepo(const HfRepoRef& repo,
                                    const std::vector<std::string>& cache_dirs) {
  const std::string folder = "models--" + repo.org + "--" + repo.name;
  const std::string id = repo.org + "/" + repo.name;
  std::string looked;
  for (const std::string& cache : cache_dirs) {
    const std::string repo_dir = JoinPath(cache, folder);
    looked += "\n  " + repo_dir + ": ";
    if (!IsDir(repo_dir)) {
      looked += "absent";
      continue;
    }
    StatusOr<std::string> dir = SnapshotOf(repo_dir, repo.revision);
    if (dir.ok()) return dir;
    looked += dir.status().message();
  }
  if (cache_dirs.empty()) {
    looked = "\n  (no cache folder: set HF_HUB_CACHE, HF_HOME or HOME)";
  }
  return NotFound("model '" + id + "' (revision " + repo.revision +
                  ") is not in the local Hugging Face cache; looked in:" + looked +
                  "\ndownload it first (e.g. `hf download " + id +
                  "`) or pass the model folder's path");
}

StatusOr<std::string> ResolveModelFolder(const std::string& model, std::string* repo_id) {
  if (repo_id != nullptr) repo_id->clear();
  std::error_code ec;
  const auto st = fs::status(model, ec);
  if (fs::exists(st)) {
    if (!fs::is_directory(st)) return InvalidArgument("'" + model + "' is not a folder");
    return model;
  }
  StatusOr<HfRepoRef> repo = ParseHfRepoId(model);
  if (!repo.ok()) return NotFound("the model folder '" + model + "' does not exist");
  StatusOr<std::string> snapshot = ResolveHfRepo(*repo, HfCacheDirs());
  if (!snapshot.ok()) {
    return NotFound("'" + model +
                    "' is neither a folder nor a cached model: " + snapshot.status().message());
  }
  if (repo_id != nullptr) *repo_id = repo->org + "/" + repo->name;
  return snapshot;
}

}  // namespace vls
