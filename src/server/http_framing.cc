#include "server/http_framing.h"

#include <boost/beast/core/buffers_prefix.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <limits>

namespace vls::server {

namespace beast = boost::beast;
namespace http = boost::beast::http;

std::string_view RequestHead::Header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (beast::iequals(k, name)) return v;
  }
  return {};
}

bool RequestHead::HasHeader(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (beast::iequals(k, name)) return true;
  }
  return false;
}

FramingVerdict CheckFraming(const http::request_header<>& h) {
  const unsigned version = h.version();
  if (version != 10 && version != 11) return {505, "unsupported HTTP version"};
  const size_t cl = h.count(http::field::content_length);
  if (cl > 1) return {400, "more than one Content-Length"};
  if (cl == 1 && h[http::field::content_length].find(',') != std::string_view::npos) {
    return {400, "a Content-Length list"};
  }
  const size_t te = h.count(http::field::transfer_encoding);
  if (te > 0) {
    if (te > 1) return {400, "more than one Transfer-Encoding"};
    if (cl > 0) return {400, "Content-Length with Transfer-Encoding"};
    if (version == 10) return {400, "Transfer-Encoding on an HTTP/1.0 request"};
    if (!beast::iequals(h[http::field::transfer_encoding], "chunked")) {
      return {501, "unsupported Transfer-Encoding (only chunked)"};
    }
  }
  const size_t host = h.count(http::field::host);
  if (host > 1 || (version == 11 && host == 0)) {
    return {400, "an HTTP/1.1 request needs exactly one Host header"};
  }
  return {};
}

RequestHead HeadOf(const http::request_header<>& h, bool has_body) {
  RequestHead head;
  head.method = std::string(h.method_string());
  head.target = std::string(h.target());
  head.path = head.target.substr(0, head.target.find('?'));
  head.version = static_cast<int>(h.version());
  for (const auto& f : h) head.headers.emplace_back(f.name_string(), f.value());
  head.has_body = has_body;
  return head;
}

namespace {

int StatusOfParseError(const beast::error_code& ec) {
  if (ec == http::error::header_limit || ec == http::error::buffer_overflow) return 431;
  if (ec == http::error::body_limit) return 413;
  if (ec == http::error::bad_version) return 505;
  return 400;
}

}  // namespace

ParsedRequest ParseRequestBytes(std::string_view bytes, size_t max_header_bytes,
                                size_t max_body_bytes) {
  ParsedRequest out;
  http::request_parser<http::string_body> p;
  p.header_limit(static_cast<std::uint32_t>(max_header_bytes));
  p.body_limit(std::numeric_limits<std::uint64_t>::max());  // checked by us (boost::none is
  // mishandled for Content-Length in Boost 1.74)
  p.eager(false);
  beast::error_code ec;
  size_t used = p.put(boost::asio::buffer(bytes.data(), bytes.size()), ec);
  if (ec == http::error::need_more) {
    if (bytes.size() > max_header_bytes + 4096) {
      out.status = 431;
      out.why = "the request header is larger than the server allows";
    }
    return out;
  }
  if (ec) {
    out.status = StatusOfParseError(ec);
    out.why = ec.message();
    return out;
  }
  out.consumed = used;
  const FramingVerdict v = CheckFraming(p.get().base());
  if (v.status != 0) {
    out.status = v.status;
    out.why = v.why;
    return out;
  }
  const bool has_body = p.chunked() || p.content_length().value_or(0) > 0;
  out.head = HeadOf(p.get().base(), has_body);
  if (const auto len = p.content_length(); len && *len > max_body_bytes) {
    out.status = 413;
    out.why = "the request body is larger than the server allows";
    return out;
  }
  p.body_limit(max_body_bytes);
  p.eager(true);
  while (!p.is_done() && out.consumed < bytes.size()) {
    used = p.put(boost::asio::buffer(bytes.data() + out.consumed, bytes.size() - out.consumed), ec);
    if (ec == http::error::need_more) {
      // The transport reads through a buffer of max_header_bytes + 4 KiB: a chunk-size, chunk
      // extension or trailer line that does not fit is refused there (buffer_overflow).
      if (bytes.size() - out.consumed > max_header_bytes + 4096) {
        out.status = 400;
        out.why = "a chunk-size or trailer line longer than the server allows";
        return out;
      }
      break;
    }
    if (ec) {
      out.status = StatusOfParseError(ec);
      out.why = ec.message();
      return out;
    }
    if (used == 0) break;
    out.consumed += used;
  }
  if (!p.is_done()) {
    beast::error_code eof;
    p.put_eof(eof);  // a body that ends with the input
    if (eof || !p.is_done()) return out;
  }
  out.complete = true;
  out.body = p.release().body();
  return out;
}

}  // namespace vls::server
