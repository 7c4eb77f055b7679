// Tokenization throughput: encodes a text file with vlstack's tokenizer and prints MB/s.
// usage: tokenizer_bench TOKENIZER_JSON TEXT_FILE [REPS]
// bench/tokenizer_bench.sh runs it next to the Hugging Face `tokenizers` npm package.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "base/file.h"
#include "tokenizer/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tokenizer_bench TOKENIZER_JSON TEXT_FILE [REPS]\n");
    return 2;
  }
  auto tok = vls::tok::Tokenizer::FromFile(argv[1]);
  auto text = vls::ReadFileToString(argv[2]);
  if (!tok.ok() || !text.ok()) {
    std::fprintf(stderr, "%s\n", (!tok.ok() ? tok.status() : text.status()).ToString().c_str());
    return 1;
  }
  const int reps = argc > 3 ? std::atoi(argv[3]) : 3;
  double best = 1e30;
  size_t n_tokens = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    auto ids = (*tok)->Encode(*text);
    const auto t1 = std::chrono::steady_clock::now();
    if (!ids.ok()) {
      std::fprintf(stderr, "%s\n", ids.status().ToString().c_str());
      return 1;
    }
    n_tokens = ids->size();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  const double mb = static_cast<double>(text->size()) / 1e6;
  std::printf(
      "{\"impl\":\"vlstack\",\"bytes\":%zu,\"tokens\":%zu,\"best_s\":%.4f,\"mb_per_s\":%.2f}\n",
      text->size(), n_tokens, best, mb / best);
  return 0;
}
