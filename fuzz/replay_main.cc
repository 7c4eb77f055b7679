// A main() for every fuzz target when libFuzzer is not available (the NAME_fuzz_replay ctests):
// runs LLVMFuzzerTestOneInput over every file in the directories or files given on the command
// line, then over deterministic random mutations (fixed seed) of each corpus file (300 per file,
// fewer for large corpora: about 30,000 in all). A crash, sanitizer report or abort fails the test.
// VLS_FUZZ_MUTATIONS overrides the mutations per file.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

using Bytes = std::vector<uint8_t>;

constexpr size_t kMutationsPerSeed = 300;
constexpr size_t kMinMutationsPerSeed = 10;
constexpr size_t kMutationBudget = 30000;

void Run(const Bytes& input) {
  // A fresh heap copy, so reads past the end are caught by ASan.
  Bytes copy = input;
  LLVMFuzzerTestOneInput(copy.empty() ? nullptr : copy.data(), copy.size());
}

Bytes Mutate(Bytes b, std::mt19937_64& rng) {
  static constexpr uint8_t kInteresting[] = {0,   1,   0x7f, 0x80, 0xff, '0', '9', '-',
                                             '.', ',', '[',  ']',  '{',  '}', '"', 'e'};
  const int steps = 1 + static_cast<int>(rng() % 4);
  for (int s = 0; s < steps; ++s) {
    const size_t n = b.size();
    switch (rng() % 7) {
      case 0:  // flip a bit
        if (n) b[rng() % n] ^= static_cast<uint8_t>(1u << (rng() % 8));
        break;
      case 1:  // an interesting byte, mostly inside the JSON header
        if (n) {
          const size_t pos =
              n > 8 && rng() % 4 ? 8 + rng() % std::min<size_t>(n - 8, 256) : rng() % n;
          b[pos] = kInteresting[rng() % std::size(kInteresting)];
        }
        break;
      case 2: {  // a new header length
        static constexpr uint64_t kLengths[] = {0, 1, 7, 8, 100, 1ull << 32, 1ull << 63, ~0ull};
        uint64_t len = rng() % 2 ? kLengths[rng() % std::size(kLengths)] : rng() % (n + 16);
        for (int i = 0; i < 8 && i < static_cast<int>(n); ++i) b[i] = (len >> (8 * i)) & 0xff;
        break;
      }
      case 3:  // truncate
        b.resize(n ? rng() % n : 0);
        break;
      case 4: {  // duplicate a chunk in place
        if (n < 2) break;
        const size_t from = rng() % n;
        const size_t len = 1 + rng() % std::min<size_t>(n - from, 32);
        const size_t to = rng() % n;
        Bytes chunk(b.begin() + from, b.begin() + from + len);
        b.insert(b.begin() + to, chunk.begin(), chunk.end());
        break;
      }
      case 5:  // erase a chunk
        if (n > 1) {
          const size_t from = rng() % n;
          b.erase(b.begin() + from, b.begin() + from + 1 + rng() % std::min<size_t>(n - from, 16));
        }
        break;
      default:  // replace a digit in the header with another digit
        for (int tries = 0; tries < 16 && n > 8; ++tries) {
          const size_t pos = 8 + rng() % (n - 8);
          if (b[pos] >= '0' && b[pos] <= '9') {
            b[pos] = static_cast<uint8_t>('0' + rng() % 10);
            break;
          }
        }
        break;
    }
  }
  return b;
}

std::vector<Bytes> ReadCorpus(int argc, char** argv) {
  std::vector<std::filesystem::path> paths;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    if (std::filesystem::is_directory(argv[i], ec)) {
      for (const auto& entry : std::filesystem::directory_iterator(argv[i], ec)) {
        if (entry.is_regular_file()) paths.push_back(entry.path());
      }
    } else {
      paths.emplace_back(argv[i]);
    }
  }
  std::sort(paths.begin(), paths.end());
  std::vector<Bytes> corpus;
  for (const auto& p : paths) {
    std::ifstream in(p, std::ios::binary);
    if (!in) {
      std::fprintf(stderr, "cannot read %s\n", p.c_str());
      std::exit(1);
    }
    corpus.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return corpus;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Bytes> seeds = ReadCorpus(argc, argv);
  const size_t corpus_files = seeds.size();
  for (const Bytes& b : seeds) Run(b);
  if (seeds.empty()) {
    std::fprintf(stderr, "no corpus files given\n");
    return 1;
  }
  // A large corpus (the inputs libFuzzer runs found) gets fewer mutations per file, so every
  // replay stays within about kMutationBudget runs.
  int mutations = static_cast<int>(
      std::clamp<size_t>(kMutationBudget / seeds.size(), kMinMutationsPerSeed, kMutationsPerSeed));
  if (const char* env = std::getenv("VLS_FUZZ_MUTATIONS")) mutations = std::atoi(env);
  std::mt19937_64 rng(0x5afe7e9501ull);
  size_t runs = corpus_files;
  for (const Bytes& seed : seeds) {
    Run(seed);
    for (int i = 0; i < mutations; ++i, ++runs) Run(Mutate(seed, rng));
  }
  std::printf("%s: %zu corpus files, %zu inputs, no crash\n", argv[0], corpus_files, runs);
  return 0;
}
