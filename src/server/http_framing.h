// The framing rules of an HTTP/1.1 request (RFC 9112, strictly), on top of Boost.Beast's parser:
// the checks a request must pass before anything reads its body. Used by the transport on every
// request (http_transport.cc) and, over whole byte strings, by tests and the fuzz target.
//
// Beast refuses bad syntax, Content-Length with Transfer-Encoding, differing Content-Lengths and
// bad chunk framing itself; these rules add what a proxy in front of us might read differently:
// one Content-Length and no list, one Transfer-Encoding that is exactly `chunked` (no other
// coding, none on HTTP/1.0), exactly one Host on HTTP/1.1, and versions 1.0 and 1.1 only.
#ifndef VLSTACK_SERVER_HTTP_FRAMING_H_
#define VLSTACK_SERVER_HTTP_FRAMING_H_

#include <boost/beast/http/fields.hpp>
#include <boost/beast/http/message.hpp>
#include <cstddef>
#include <string>
#include <string_view>

#include "server/http_transport.h"

namespace vls::server {

struct FramingVerdict {
  int status = 0;   // 0: acceptable; else the answer (400, 501, 505), and the connection ends
  std::string why;  // for the answer and the log
};

FramingVerdict CheckFraming(const boost::beast::http::request_header<>& h);

// The request's head as the handler sees it (path without the query, headers as sent).
RequestHead HeadOf(const boost::beast::http::request_header<>& h, bool has_body);

// One whole request from bytes, the way the transport reads it: the header within
// `max_header_bytes`, the framing checked, a body within `max_body_bytes`.
struct ParsedRequest {
  int status = 0;  // 0: a complete request; else the refusal (400, 413, 431, 501, 505)
  std::string why;
  bool complete = false;  // more bytes were needed (status 0 and not complete)
  RequestHead head;
  std::string body;
  size_t consumed = 0;  // bytes of the input the request took
};
ParsedRequest ParseRequestBytes(std::string_view bytes, size_t max_header_bytes,
                                size_t max_body_bytes);

}  // namespace vls::server

#endif  // VLSTACK_SERVER_HTTP_FRAMING_H_
