// The HTTP/1.1 transport of `vlstack serve` (ADR 0023): Boost.Beast's strict request parser over
// Boost.Asio (epoll), independent of what is served. The OpenAI routes live in http_server.cc.
//
// What it guarantees before any handler runs:
//   - framing is strict (RFC 9112): Content-Length together with Transfer-Encoding, two
//     Content-Length fields or a list, any transfer coding but a lone `chunked`, bad chunk
//     framing, obsolete versions: refused, and the connection closed;
//   - every line and the whole header block are bounded (`max_header_bytes`, also the bound of a
//     chunk-size line), and the header must arrive within `header_timeout` (a client trickling a
//     byte every few seconds is dropped);
//   - no body is read before the handler has seen the header (routes, methods, authentication,
//     Content-Length checked first); a body is read only up to the limit the handler gives, each
//     read bounded by `read_timeout`;
//   - a response is written with backpressure: a streaming writer blocks while `max_pending`
//     bytes are unsent, and a client that reads nothing for `write_timeout` is dropped;
//   - refused requests get their answer and a lingering close (what the client still sends is
//     read and dropped, bounded in bytes and time), so they read the answer, not a reset.
//
// Threads: one I/O thread (Run()) owns every socket; a handler's work for a request with a
// body runs on a worker thread (an elastic pool: a thread per request being computed, started
// as needed up to `max_workers`). An HttpExchange may be used from the worker thread.
#ifndef VLSTACK_SERVER_HTTP_TRANSPORT_H_
#define VLSTACK_SERVER_HTTP_TRANSPORT_H_

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace vls::server {

using HeaderList = std::vector<std::pair<std::string, std::string>>;

struct TransportOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port
  int backlog = 1024;
  size_t max_header_bytes = size_t{32} << 10;       // request line and header block together
  size_t max_connections = 4096;                    // more are answered 503 and closed
  size_t max_workers = 1024;                        // requests computed at once
  size_t max_pending = size_t{256} << 10;           // unsent response bytes before Write() blocks
  std::chrono::milliseconds header_timeout{10000};  // the whole header, from its first byte
  std::chrono::milliseconds idle_timeout{5000};     // keep-alive wait for the next request
  std::chrono::milliseconds read_timeout{10000};    // a body read making no progress
  std::chrono::milliseconds write_timeout{30000};   // a write making no progress
  size_t linger_bytes = size_t{16} << 20;           // dropped after a refusal, at most
  std::chrono::milliseconds linger_time{2000};      // ... for at most this long
};

// The request's line and header, as parsed.
struct RequestHead {
  std::string method;  // as sent ("GET", "POST", ...)
  std::string target;  // as sent, with the query
  std::string path;    // target up to '?'
  int version = 11;    // 10 or 11
  HeaderList headers;  // names as sent
  std::string remote;  // "addr:port"
  bool has_body = false;
  // The value of the first header named `name` (case-insensitive); empty when absent.
  std::string_view Header(std::string_view name) const;
  bool HasHeader(std::string_view name) const;
};

// One request and its response. Reply, or BeginStream/Write/EndStream, exactly once.
class HttpExchange {
 public:
  virtual ~HttpExchange() = default;
  virtual const RequestHead& head() const = 0;
  virtual const std::string& body() const = 0;

  // A whole response. `close`: the connection ends after it.
  virtual void Reply(int status, std::string_view content_type, std::string body,
                     const HeaderList& extra = {}, bool close = false) = 0;
  // A chunked response (HTTP/1.0: an unframed one that ends with the connection).
  virtual void BeginStream(int status, std::string_view content_type, const HeaderList& extra) = 0;
  // Queues `data`; blocks while more than max_pending bytes are unsent. False once the client
  // is gone (closed, reset, or not reading for write_timeout): stop producing.
  virtual bool Write(std::string_view data) = 0;
  virtual void EndStream() = 0;
  // True when the client closed or half-closed its side, or the connection failed.
  virtual bool PeerGone() const = 0;
  // Called once on the I/O thread when the response has been written (`complete`) or failed.
  virtual void OnDone(std::function<void(int status, bool complete)> done) = 0;
  // A header every response of this exchange carries (the request id); before Reply/BeginStream.
  virtual void AddHeader(std::string name, std::string value) = 0;
};

// What the handler decides from the header alone.
struct HeadDecision {
  // Null: the handler replied from the header (the body, if any, is not read).
  // Otherwise: read the body (up to body_limit bytes, else 413) and then run this on a worker.
  std::function<void(std::shared_ptr<HttpExchange>)> run;
  size_t body_limit = 0;
};

class TransportHandler {
 public:
  virtual ~TransportHandler() = default;
  // On the I/O thread, with the header read and its framing checked. Must not block.
  virtual HeadDecision OnHead(const std::shared_ptr<HttpExchange>& ex) = 0;
  // A request the transport refused itself (framing, limits, timeouts of a started request):
  // status is the answer sent (or 0 when the connection was only closed); for logs and metrics.
  virtual void OnRefused(const RequestHead& head, int status, std::string_view why) = 0;
};

class HttpTransport {
 public:
  HttpTransport(TransportOptions options, TransportHandler* handler);
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  // Takes the address; returns the port (the chosen one with port 0).
  StatusOr<int> Bind();
  // Serves until Stop(); returns when the listener has closed and every connection has ended.
  Status Run();
  // Draining: idle and half-received connections are closed now, and every answer from now on
  // ends its connection. The listener stays open, so that a load balancer's health check reads
  // "draining" rather than a refused connection, until CloseListener().
  void BeginDrain();
  // New connections are refused from now on.
  void CloseListener();
  // Closes the listener and every connection (a streaming Write() returns false); Run() returns
  // once the handlers still running have returned.
  void Stop();
  // Connections open now (for tests and metrics).
  size_t connections() const;

  struct Impl;  // the I/O state shared with the connections (http_transport.cc)

 private:
  std::shared_ptr<Impl> impl_;
};

// "200 OK"-style reason phrase of a status.
std::string_view ReasonPhrase(int status);

}  // namespace vls::server

#endif  // VLSTACK_SERVER_HTTP_TRANSPORT_H_
