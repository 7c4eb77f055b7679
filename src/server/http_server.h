// The HTTP server of `vlstack serve` (docs/contracts.md §7): routes, methods, authentication and
// body limits (all decided from the header, before a body is read), server-sent events, disconnect
// detection, request logs, and the drain on shutdown, over the strict HTTP/1.1 transport of
// http_transport.h (Boost.Beast; ADR 0023). The OpenAI mapping is openai_request/openai_response;
// the engine is behind GenerationService.
//
// Life cycle: Bind() (the port is taken and accepts connections: /health answers 503
// "loading"), SetReady() once the model is loaded, Run() on one thread until Stop(). Drain()
// (SIGTERM): /health/ready (and /health) and new requests answer 503 at once, while
// /health/live stays 200; requests in flight finish (up to the timeout, then they are
// cancelled); then the listener closes and the server stops. A load balancer's X-Request-Id is
// logged and echoed (the server's own id otherwise).
//
// Every request gets one JSON log line on stderr (id, method, path, status, tokens, timings) and
// is counted in the metrics by endpoint and outcome.
#ifndef VLSTACK_SERVER_HTTP_SERVER_H_
#define VLSTACK_SERVER_HTTP_SERVER_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "base/status.h"
#include "runtime/chat_pipeline.h"
#include "runtime/image_encoder.h"
#include "server/generation_service.h"
#include "server/metrics.h"
#include "server/openai_request.h"

namespace vls::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;       // 0: any free port
  std::string model_id;  // /v1/models' id
  std::string api_key;   // empty: no authentication
  size_t max_body_bytes = size_t{64} << 20;
  RequestLimits limits;
  int http_threads = 1024;    // requests computed at once (a thread each, started as needed)
  int read_timeout_s = 10;    // a header not complete, or a body making no progress, this long
  int write_timeout_s = 30;   // a client that reads nothing for this long is dropped
  int backlog = 1024;         // connections the kernel queues before they are accepted
  bool log_requests = true;   // one JSON line per request on stderr
  int overload_status = 429;  // a full queue's answer: 429, or 503 behind a load balancer
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, ServerMetrics* metrics);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Takes the address; returns the port (the chosen one with port 0). IoError when it is taken.
  StatusOr<int> Bind();
  // The model is loaded: generation endpoints open. `service`, `pipeline` and `images` (the
  // pipeline's encoder, whose video counters /metrics shows; may be null) outlive the server.
  void SetReady(GenerationService* service, const ChatPipeline* pipeline, int capacity,
                const ImageEncoder* images = nullptr);
  // Serves connections until Stop(); returns when the listener has closed and every connection
  // has been served.
  Status Run();
  // Refuses new requests (503) and waits for those in flight, cancelling what is left after
  // `timeout`; then Stop(). Returns true when everything finished in time.
  bool Drain(std::chrono::milliseconds timeout);
  void Stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace vls::server

#endif  // VLSTACK_SERVER_HTTP_SERVER_H_
