// Test helper (tests only): scratch paths under the temp folder, unique to the process and
// removed with everything under them when the process exits normally, so that repeated test
// runs do not fill the temp folder.
#ifndef VLSTACK_BASE_SCRATCH_TEST_UTIL_H_
#define VLSTACK_BASE_SCRATCH_TEST_UTIL_H_

#include <unistd.h>

#include <filesystem>
#include <mutex>
#include <string>
#include <system_error>
#include <vector>

namespace vls::test {

// The paths handed out so far; the registry's destructor (at exit) removes them.
class ScratchRegistry {
 public:
  static ScratchRegistry& Get() {
    static ScratchRegistry registry;
    return registry;
  }
  void Add(const std::filesystem::path& p) {
    const std::lock_guard<std::mutex> lock(mu_);
    paths_.push_back(p);
  }
  ScratchRegistry(const ScratchRegistry&) = delete;
  ScratchRegistry& operator=(const ScratchRegistry&) = delete;
  ~ScratchRegistry() {
    std::error_code ec;  // best effort: a path already gone, or never made, is fine
    for (const std::filesystem::path& p : paths_) std::filesystem::remove_all(p, ec);
  }

 private:
  ScratchRegistry() = default;
  std::mutex mu_;
  std::vector<std::filesystem::path> paths_;
};

// temp/<prefix><pid>_<name> (CTest runs tests as concurrent processes), removed at exit. The
// path is not created: a caller makes a file or a folder there.
inline std::string ScratchPath(const std::string& prefix, const std::string& name) {
  const std::filesystem::path p =
      std::filesystem::temp_directory_path() / (prefix + std::to_string(::getpid()) + "_" + name);
  ScratchRegistry::Get().Add(p);
  return p.string();
}

}  // namespace vls::test

#endif  // VLSTACK_BASE_SCRATCH_TEST_UTIL_H_
