// The request framing rules (http_framing.h) over whole byte strings: what Beast refuses, what
// the extra RFC 9112 rules refuse, and what goes through.
#include "server/http_framing.h"

#include <gtest/gtest.h>

#include <string>

namespace vls::server {
namespace {

constexpr size_t kHeader = 32 << 10;
constexpr size_t kBody = 1 << 20;

ParsedRequest Parse(const std::string& bytes, size_t body = kBody) {
  return ParseRequestBytes(bytes, kHeader, body);
}

TEST(HttpFraming, AcceptsPlainRequests) {
  ParsedRequest r = Parse("GET /health?x=1 HTTP/1.1\r\nHost: a\r\n\r\n");
  EXPECT_EQ(r.status, 0) << r.why;
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.head.method, "GET");
  EXPECT_EQ(r.head.path, "/health");
  EXPECT_EQ(r.head.target, "/health?x=1");
  EXPECT_FALSE(r.head.has_body);
  EXPECT_EQ(r.head.Header("host"), "a");

  r = Parse("POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello");
  EXPECT_EQ(r.status, 0) << r.why;
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.body, "hello");

  r = Parse(
      "POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nhel\r\n2;ext=1\r\nlo\r\n0\r\n\r\n");
  EXPECT_EQ(r.status, 0) << r.why;
  EXPECT_TRUE(r.complete);
  EXPECT_EQ(r.body, "hello");

  r = Parse("GET / HTTP/1.0\r\n\r\n");  // HTTP/1.0 needs no Host
  EXPECT_EQ(r.status, 0) << r.why;
}

TEST(HttpFraming, RefusesSmugglingShapes) {
  const std::string chunked = "5\r\nhello\r\n0\r\n\r\n";
  struct Case {
    std::string headers, body;
    int status;
  } cases[] = {
      {"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n", chunked, 400},
      {"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n", chunked, 400},
      {"Content-Length: 5\r\nContent-Length: 6\r\n", "hello!", 400},
      {"Content-Length: 5\r\nContent-Length: 5\r\n", "hello", 400},
      {"Content-Length: 5, 5\r\n", "hello", 400},
      {"Transfer-Encoding: gzip, chunked\r\n", chunked, 501},
      {"Transfer-Encoding: chunked, gzip\r\n", chunked, 501},
      {"Transfer-Encoding: gzip\r\n", "hello", 501},
      {"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n", chunked, 400},
      {"Transfer-Encoding: chunked\r\n", "5\r\nhelloXX0\r\n\r\n", 400},  // data without CRLF
      {"Transfer-Encoding: chunked\r\n", "zz\r\nhello\r\n0\r\n\r\n", 400},
      {"Content-Length: -1\r\n", "", 400},
      {"Content-Length: 99999999999999999999999\r\n", "", 400},
      {"Host: b\r\n", "", 400},  // a second Host
  };
  for (const Case& c : cases) {
    const ParsedRequest r = Parse("POST /x HTTP/1.1\r\nHost: a\r\n" + c.headers + "\r\n" + c.body);
    EXPECT_EQ(r.status, c.status) << c.headers << " -> " << r.why;
  }
  EXPECT_EQ(Parse("GET /x HTTP/1.1\r\n\r\n").status, 400);  // no Host on HTTP/1.1
  EXPECT_EQ(Parse("POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n").status, 400);
  EXPECT_EQ(Parse("GET /x HTTP/2.0\r\nHost: a\r\n\r\n").status, 505);
  EXPECT_EQ(Parse("GET /x HTTP/1.1\r\nHost: a\r\nBad Name: v\r\n\r\n").status, 400);
}

TEST(HttpFraming, BoundsLinesHeadersAndBodies) {
  // A request line, a header line and a chunk-size line that never end.
  EXPECT_EQ(Parse("GET /" + std::string(100000, 'a')).status, 431);
  EXPECT_EQ(Parse("GET / HTTP/1.1\r\nHost: a\r\nX: " + std::string(100000, 'v')).status, 431);
  EXPECT_EQ(Parse("GET /" + std::string(40000, 'a') + " HTTP/1.1\r\nHost: a\r\n\r\n").status, 431);
  // Under the header limit, an unended line only waits for more.
  ParsedRequest r = Parse("GET / HTTP/1.1\r\nHost: a\r\nX: vvv");
  EXPECT_EQ(r.status, 0);
  EXPECT_FALSE(r.complete);
  // Bodies: a declared length over the limit is refused from the header; a chunked body when it
  // passes the limit.
  r = Parse("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2000000\r\n\r\n", kBody);
  EXPECT_EQ(r.status, 413);
  std::string big = "POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n";
  for (int i = 0; i < 40; ++i) big += "8000\r\n" + std::string(0x8000, 'b') + "\r\n";
  EXPECT_EQ(Parse(big + "0\r\n\r\n", kBody).status, 413);
  EXPECT_EQ(Parse(big + "0\r\n\r\n", 4 << 20).status, 0);
  // An endless chunk-size line.
  r = Parse("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n" +
            std::string(200000, 'f'));
  EXPECT_NE(r.status, 0);
}

}  // namespace
}  // namespace vls::server
