// Models by name: a Hugging Face repository id ("Qwen/Qwen3-VL-2B-Instruct", optionally
// "@revision") resolved, offline, to its snapshot folder in the local Hugging Face cache.
//
// The cache layout (huggingface_hub's, shared by every tool that downloads from the Hub):
//
//   <cache>/models--Org--Name/refs/<branch or tag>   a file holding the commit hash
//   <cache>/models--Org--Name/snapshots/<commit>/     the files (links into ../../blobs/)
//
// <cache> is looked for where huggingface_hub puts it, in this order (each once): $HF_HUB_CACHE,
// $HUGGINGFACE_HUB_CACHE (its old name), $HF_HOME/hub, $XDG_CACHE_HOME/huggingface/hub,
// $HOME/.cache/huggingface/hub. Nothing is downloaded.
#ifndef VLSTACK_IO_HF_CACHE_H_
#define VLSTACK_IO_HF_CACHE_H_

#include <functional>
#include <string>
#include <vector>

#include "base/status.h"

namespace vls {

// A repository id and revision split from "Org/Name" or "Org/Name@revision" (revision "main"
// when absent).
struct HfRepoRef {
  std::string org;
  std::string name;
  std::string revision;
};

// Parses `ref` as a repository id: "Org/Name[@revision]", Org and Name of 1 to 96 characters
// from [A-Za-z0-9._-], neither starting with '.' or '-' nor holding "..", and a revision of
// [A-Za-z0-9._/-] without "..", a leading '/' or a leading '.'. InvalidArgument otherwise.
StatusOr<HfRepoRef> ParseHfRepoId(const std::string& ref);

// The cache folders to search, in order, without repeats, from the environment `getenv` reads
// (std::getenv by default; a test passes its own). Empty variables are skipped.
std::vector<std::string> HfCacheDirs(
    const std::function<const char*(const char*)>& getenv = nullptr);

// The snapshot folder of `repo` in the first of `cache_dirs` that holds the repository:
// refs/<revision> names the commit; a revision of 7 to 40 hex digits may also name a snapshot
// folder directly (the first one it starts); a repository with no refs/<revision> file but a
// single snapshot (a cache written by hand or a partial copy) uses that one. The snapshot must
// hold config.json. NotFound names the repository and every place looked at and why it did not
// match (absent, no such revision, incomplete snapshot).
StatusOr<std::string> ResolveHfRepo(const HfRepoRef& repo,
                                    const std::vector<std::string>& cache_dirs);

// What a user's "model" names: `model` itself when that path exists (InvalidArgument when it
// is not a folder), else the snapshot folder of the repository id `model` in HfCacheDirs()
// (NotFound saying where it looked), else NotFound for a folder that does not exist.
// *repo_id (when non-null) receives "Org/Name" when the id was resolved, else is cleared.
StatusOr<std::string> ResolveModelFolder(const std::string& model, std::string* repo_id = nullptr);

}  // namespace vls

#endif  // VLSTACK_IO_HF_CACHE_H_
