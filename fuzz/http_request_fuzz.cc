// Fuzz target for the server's HTTP/1.1 request framing (src/server/http_framing.h): Boost.Beast's
// parser with the transport's limits and the strict RFC 9112 rules, over any bytes.
//
// Every input must give a refusal with a status the transport answers (400, 413, 431, 501, 505),
// an incomplete request, or a complete one whose body is within the limit and whose head keeps
// the rules (a method, a path starting the target). Nothing may throw.
//
// Real fuzzing: scripts/fuzz.sh 600 http_request. Without libFuzzer, http_request_fuzz_replay (a
// ctest) runs it over tests/corpus/http_request and fixed-seed mutations.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "server/http_framing.h"

namespace {

[[noreturn]] void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "http_request_fuzz: %s: %s\n", what, detail.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  constexpr size_t kHeader = 4096;
  constexpr size_t kBody = 8192;
  const vls::server::ParsedRequest r = vls::server::ParseRequestBytes(bytes, kHeader, kBody);
  switch (r.status) {
    case 0: break;
    case 400:
    case 413:
    case 431:
    case 501:
    case 505:
      if (r.why.empty()) Fail("a refusal without a reason", std::to_string(r.status));
      return 0;
    default: Fail("an unexpected status", std::to_string(r.status));
  }
  if (!r.complete) return 0;
  if (r.body.size() > kBody) Fail("a body over the limit", std::to_string(r.body.size()));
  if (r.consumed > size) Fail("consumed more than the input", std::to_string(r.consumed));
  if (r.head.method.empty()) Fail("no method", std::string(bytes.substr(0, 80)));
  if (r.head.target.compare(0, r.head.path.size(), r.head.path) != 0) {
    Fail("the path is not a prefix of the target", r.head.target);
  }
  if (r.head.version != 10 && r.head.version != 11) Fail("a version", r.head.target);
  return 0;
}
