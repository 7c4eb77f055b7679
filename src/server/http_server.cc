#include "server/http_server.h"

#include <httplib.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <array>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/chat_json.h"
#include "server/chat_page.h"
#include "server/connection_probe.h"
#include "server/openai_response.h"

namespace vls::server {
namespace {

using Json = nlohmann::ordered_json;
using httplib::Request;
using httplib::Response;

// What the log line and the metrics of the request being served on this thread need. The
// HTTP library serves a request (handler, streamed body, logger) on one thread.
struct RequestLog {
  std::string id;
  Clock::time_point start;
  std::string endpoint = "other";
  bool generation = false;  // a chat or completion was submitted
  bool cancelled = false;   // the client went away
  Usage usage;
  std::string finish;
  double ttft_ms = -1;
  std::string error;
};
thread_local RequestLog t_log;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

void SetJson(Response& res, int status, const Json& body) {
  res.status = status;
  res.set_content(DumpJson(body), "application/json");
}

void SetError(Response& res, const OpenAiError& e) {
  t_log.error = e.message;
  if (e.status == 429 || e.status == 503) res.set_header("Retry-After", "1");
  SetJson(res, e.status, ErrorBody(e));
}

OpenAiError MakeError(int status, std::string message, std::string type = "invalid_request_error",
                      std::string code = "") {
  OpenAiError e;
  e.status = status;
  e.message = std::move(message);
  e.type = std::move(type);
  e.code = std::move(code);
  return e;
}

std::string_view EndpointOf(const std::string& path) {
  if (path == "/v1/chat/completions") return "chat";
  if (path == "/v1/completions") return "completions";
  if (path == "/tokenize") return "tokenize";
  if (path == "/detokenize") return "detokenize";
  if (path.rfind("/v1/models", 0) == 0) return "models";
  if (path == "/health") return "health";
  if (path == "/metrics") return "metrics";
  return "other";
}

// How much of a refused body is read (and discarded) before the 413, so that the client, still
// sending, reads the answer rather than a reset.
constexpr size_t kDrainBytes = size_t{16} << 20;

OpenAiError BodyTooLarge(size_t max) {
  OpenAiError e = MakeError(413, "the request body is larger than --max-body-mb allows (" +
                                     std::to_string(max) + " bytes)");
  e.code = "body_too_large";
  return e;
}

// Constant-time comparison of the key a client sent with ours (digests, so the length leaks
// nothing either).
bool KeyMatches(const std::string& sent, const std::string& key) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> a{}, b{};
  SHA256(reinterpret_cast<const unsigned char*>(sent.data()), sent.size(), a.data());
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), b.data());
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// Counts a generation being answered (its body may still be streaming) while it lives.
class ActiveGuard {
 public:
  explicit ActiveGuard(std::atomic<int>* n) : n_(n) { n_->fetch_add(1); }
  ~ActiveGuard() { n_->fetch_sub(1); }
  ActiveGuard(const ActiveGuard&) = delete;
  ActiveGuard& operator=(const ActiveGuard&) = delete;

 private:
  std::atomic<int>* n_;
};

// The HTTP library's task queue: a connection is served by one thread from start to end (a
// streaming client holds its thread), so a fixed pool of N lets N stalled clients lock everyone
// else out. This pool starts a thread whenever every thread is busy, up to `max_threads`, and a
// thread idle for a minute ends: stalled connections cost a thread each (until the read timeout
// drops them), not the server.
class ElasticPool : public httplib::TaskQueue {
 public:
  explicit ElasticPool(size_t max_threads) : max_(max_threads) {}

  void enqueue(std::function<void()> fn) override {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_.push_back(std::move(fn));
    if (jobs_.size() > idle_ && threads_ < max_) {
      try {
        std::thread([this] { Work(); }).detach();
        ++threads_;
      } catch (const std::system_error&) {  // no thread now: a running one takes the job later
      }
    }
    cv_.notify_one();
  }

  void shutdown() override {
    std::unique_lock<std::mutex> lock(mu_);
    stop_ = true;
    cv_.notify_all();
    done_cv_.wait(lock, [this] { return threads_ == 0; });
  }

 private:
  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      ++idle_;
      const bool woken =
          cv_.wait_for(lock, std::chrono::seconds(60), [this] { return !jobs_.empty() || stop_; });
      --idle_;
      if (jobs_.empty()) {  // idle for a minute, or stopping with nothing left to do
        if (woken && !stop_) continue;
        --threads_;
        done_cv_.notify_all();
        return;  // `this` is not touched after the lock is released
      }
      std::function<void()> fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  const size_t max_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> jobs_;
  size_t idle_ = 0, threads_ = 0;
  bool stop_ = false;
};

}  // namespace

struct HttpServer::Impl {
  HttpOptions options;
  ServerMetrics* metrics;
  httplib::Server http;
  std::atomic<GenerationService*> service{nullptr};
  const ChatPipeline* pipeline = nullptr;
  int capacity = 0;
  std::atomic<bool> draining{false};
  std::atomic<int> answering{0};  // generations whose answer is not fully written
  int64_t started = static_cast<int64_t>(std::time(nullptr));
  std::mutex log_mu;

  Impl(HttpOptions o, ServerMetrics* m) : options(std::move(o)), metrics(m) {}

  void Routes();
  // Answers 503 (and returns null) while loading or draining.
  GenerationService* Open(Response& res);
  bool ParseBody(const std::string& text, Response& res, Json* body);
  void Chat(const Request& req, const std::string& body_text, Response& res);
  void Completions(const Request& req, const std::string& body_text, Response& res);
  void Tokenize(const Request& req, const std::string& body_text, Response& res);
  void Detokenize(const Request& req, const std::string& body_text, Response& res);
  template <typename Responder>
  void Generate(const Request& req, Response& res, GenerationService& svc, PreparedChat chat,
                std::unique_ptr<Responder> responder, bool stream);
  void Log(const Request& req, const Response& res);
  GaugeValues Gauges() const;
};

GenerationService* HttpServer::Impl::Open(Response& res) {
  GenerationService* svc = service.load();
  if (svc == nullptr) {
    SetError(res, MakeError(503, "the model is still loading", "server_error", "loading"));
    return nullptr;
  }
  if (draining.load()) {
    res.set_header("Connection", "close");
    SetError(res, MakeError(503, "the server is shutting down", "server_error", "draining"));
    return nullptr;
  }
  return svc;
}

bool HttpServer::Impl::ParseBody(const std::string& text, Response& res, Json* body) {
  Status s = ParseUntrustedOrderedJson("request body", text, body);
  if (!s.ok()) {
    SetError(res, MakeError(400, s.message()));
    return false;
  }
  if (!body->is_object()) {
    SetError(res, MakeError(400, "the request body must be a JSON object"));
    return false;
  }
  return true;
}

template <typename Responder>
void HttpServer::Impl::Generate(const Request& req, Response& res, GenerationService& svc,
                                PreparedChat chat, std::unique_ptr<Responder> responder,
                                bool stream) {
  auto submitted = svc.Submit(std::move(chat));
  if (!submitted.ok()) {
    SetError(res, ErrorFromStatus(submitted.status()));
    return;
  }
  t_log.generation = true;
  auto guard = std::make_shared<ActiveGuard>(&answering);
  std::shared_ptr<RequestHandle> handle = std::move(*submitted);
  auto probe = std::make_shared<ConnectionProbe>(req.local_addr, req.local_port, req.remote_addr,
                                                 req.remote_port);
  auto note = [handle](const Responder& r) {
    t_log.usage = r.usage();
    t_log.finish = FinishReasonName(r.finish());
    if (auto first = handle->first_token()) {
      t_log.ttft_ms =
          std::chrono::duration<double, std::milli>(*first - handle->submitted()).count();
    }
    if (r.finish() == FinishReason::kError) t_log.error = r.error();
  };
  if (!stream) {
    std::vector<OutputPiece> pieces;
    bool end = false;
    while (!end) {
      end = handle->Take(&pieces, std::chrono::milliseconds(100));
      for (const OutputPiece& p : pieces) responder->Collect(p);
      pieces.clear();
      if (!end && probe->PeerGone()) {
        svc.Cancel(*handle);
        t_log.cancelled = true;
      }
    }
    note(*responder);
    if (responder->finish() == FinishReason::kError) {
      SetError(res, MakeError(500, "generation failed: " + responder->error(), "server_error"));
    } else if (responder->finish() == FinishReason::kCancelled) {
      t_log.cancelled = true;
      SetError(res,
               MakeError(499, "the request was cancelled", "invalid_request_error", "cancelled"));
    } else {
      SetJson(res, 200, responder->Completion());
    }
    return;
  }

  struct StreamState {
    std::shared_ptr<RequestHandle> handle;
    std::unique_ptr<Responder> responder;
    std::shared_ptr<ConnectionProbe> probe;
    std::shared_ptr<ActiveGuard> guard;
    bool ended = false;
  };
  auto st = std::make_shared<StreamState>();
  st->handle = handle;
  st->responder = std::move(responder);
  st->probe = probe;
  st->guard = guard;
  GenerationService* svc_ptr = &svc;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [st, svc_ptr, note](size_t /*offset*/, httplib::DataSink& sink) {
        std::vector<OutputPiece> pieces;
        const bool end = st->handle->Take(&pieces, std::chrono::milliseconds(100));
        std::string out;
        for (const OutputPiece& p : pieces) {
          for (const std::string& payload : st->responder->StreamPiece(p)) {
            out += "data: " + payload + "\n\n";
          }
        }
        if (end) {
          for (const std::string& payload : st->responder->StreamEnd()) {
            out += "data: " + payload + "\n\n";
          }
          if (st->responder->finish() != FinishReason::kCancelled) out += "data: [DONE]\n\n";
        }
        // A write into a connection the client closed may still succeed (the kernel buffers
        // it); the probe sees the close at once.
        if ((!out.empty() && !sink.write(out.data(), out.size())) ||
            (!end && st->probe->PeerGone())) {
          // The client left: cancel, and take the pieces up to the cancelled one for the log.
          svc_ptr->Cancel(*st->handle);
          std::vector<OutputPiece> rest;
          st->handle->Take(&rest, std::chrono::milliseconds(0));
          for (const OutputPiece& p : rest) st->responder->StreamPiece(p);
          st->ended = true;
          t_log.cancelled = true;
          note(*st->responder);
          return false;
        }
        if (end) {
          st->ended = true;
          note(*st->responder);
          if (st->responder->finish() == FinishReason::kCancelled) t_log.cancelled = true;
          sink.done();
        }
        return true;
      },
      [st, svc_ptr](bool /*success*/) {
        if (!st->ended && !st->handle->finished()) {
          svc_ptr->Cancel(*st->handle);
          t_log.cancelled = true;
        }
      });
}

void HttpServer::Impl::Chat(const Request& req, const std::string& body_text, Response& res) {
  GenerationService* svc = Open(res);
  if (svc == nullptr) return;
  Json body;
  if (!ParseBody(body_text, res, &body)) return;
  auto parsed = ParseChatCompletionRequest(body, pipeline->generation_defaults(), options.limits);
  if (!parsed.ok()) return SetError(res, ErrorFromStatus(parsed.status()));
  auto prepared = pipeline->Prepare(parsed->chat);
  if (!prepared.ok()) return SetError(res, ErrorFromStatus(prepared.status()));
  ResponseMeta meta{NewId("chatcmpl-"), options.model_id, static_cast<int64_t>(std::time(nullptr))};
  t_log.id = meta.id;
  auto responder = std::make_unique<ChatResponder>(*parsed, meta, &pipeline->tokenizer());
  Generate(req, res, *svc, std::move(*prepared), std::move(responder), parsed->stream);
}

void HttpServer::Impl::Completions(const Request& req, const std::string& body_text,
                                   Response& res) {
  GenerationService* svc = Open(res);
  if (svc == nullptr) return;
  Json body;
  if (!ParseBody(body_text, res, &body)) return;
  auto parsed = ParseCompletionRequest(body, pipeline->generation_defaults(), options.limits);
  if (!parsed.ok()) return SetError(res, ErrorFromStatus(parsed.status()));
  auto prepared = parsed->prompt ? pipeline->PrepareText(*parsed->prompt, parsed->params)
                                 : pipeline->PrepareTokens(*parsed->tokens, parsed->params);
  if (!prepared.ok()) return SetError(res, ErrorFromStatus(prepared.status()));
  ResponseMeta meta{NewId("cmpl-"), options.model_id, static_cast<int64_t>(std::time(nullptr))};
  t_log.id = meta.id;
  auto responder = std::make_unique<CompletionResponder>(*parsed, meta, &pipeline->tokenizer());
  Generate(req, res, *svc, std::move(*prepared), std::move(responder), parsed->stream);
}

void HttpServer::Impl::Tokenize(const Request& req, const std::string& body_text, Response& res) {
  if (Open(res) == nullptr) return;
  Json body;
  if (!ParseBody(body_text, res, &body)) return;
  std::string text;
  for (const auto& [k, v] : body.items()) {
    if (k != "content" && k != "prompt" && k != "messages" && k != "add_special" &&
        k != "add_generation_prompt" && k != "tools" && k != "model") {
      return SetError(res, MakeError(400, "\"" + k + "\" is not a known field"));
    }
  }
  const bool has_text = body.contains("content") || body.contains("prompt");
  if (has_text == body.contains("messages")) {
    return SetError(res, MakeError(400, "give either \"content\" (or \"prompt\") or \"messages\""));
  }
  if (has_text) {
    const Json& t = body.contains("content") ? body["content"] : body["prompt"];
    if (!t.is_string()) return SetError(res, MakeError(400, "\"content\" must be a string"));
    text = t.get<std::string>();
  } else {
    Json chat_body{{"messages", body["messages"]}};
    for (const char* k : {"add_generation_prompt", "tools"}) {
      if (body.contains(k)) chat_body[k] = body[k];
    }
    auto chat = ChatRequestFromJson(chat_body, pipeline->generation_defaults());
    if (!chat.ok()) return SetError(res, ErrorFromStatus(chat.status()));
    auto rendered = pipeline->Render(*chat);
    if (!rendered.ok()) return SetError(res, ErrorFromStatus(rendered.status()));
    text = std::move(*rendered);
  }
  auto ids = pipeline->tokenizer().Encode(text);
  if (!ids.ok()) return SetError(res, ErrorFromStatus(ids.status()));
  SetJson(res, 200, Json{{"tokens", *ids}, {"count", ids->size()}, {"max_model_len", capacity}});
}

void HttpServer::Impl::Detokenize(const Request& req, const std::string& body_text, Response& res) {
  if (Open(res) == nullptr) return;
  Json body;
  if (!ParseBody(body_text, res, &body)) return;
  for (const auto& [k, v] : body.items()) {
    if (k != "tokens" && k != "model") {
      return SetError(res, MakeError(400, "\"" + k + "\" is not a known field"));
    }
  }
  auto t = body.find("tokens");
  if (t == body.end() || !t->is_array()) {
    return SetError(res, MakeError(400, "\"tokens\" must be a list of token ids"));
  }
  const int64_t limit = pipeline->tokenizer().id_limit();
  std::vector<int32_t> ids;
  for (const Json& x : *t) {
    int64_t id = 0;
    Status s = ReadJsonInt(x, "each of \"tokens\"", 0, limit - 1, &id);
    if (!s.ok()) return SetError(res, ErrorFromStatus(s));
    ids.push_back(static_cast<int32_t>(id));
  }
  const std::string text = pipeline->tokenizer().Decode(ids);
  SetJson(res, 200, Json{{"prompt", text}, {"content", text}});
}

GaugeValues HttpServer::Impl::Gauges() const {
  GaugeValues g;
  if (GenerationService* svc = service.load()) {
    const ServiceLoad l = svc->load();
    g.queue_depth = l.queued;
    g.slots_busy = l.busy;
    g.slots_total = l.slots;
    g.requests_in_flight = l.in_flight;
    g.verify_passes = l.verify_passes;
    g.draft_tokens = l.draft_tokens;
    g.accepted_draft_tokens = l.accepted_draft_tokens;
  }
  g.draining = draining.load() ? 1 : 0;
  return g;
}

void HttpServer::Impl::Log(const Request& req, const Response& res) {
  const RequestLog& l = t_log;
  std::string outcome = "ok";
  if (l.cancelled) {
    outcome = "cancelled";
  } else if (res.status == 429 || res.status == 503) {
    outcome = "rejected";
  } else if (res.status >= 500) {
    outcome = "server_error";
  } else if (res.status >= 400) {
    outcome = "client_error";
  }
  const double ms = MsSince(l.start);
  if (metrics != nullptr) {
    metrics->CountRequest(l.endpoint, outcome);
    if (l.generation) metrics->ObserveRequestDuration(ms / 1e3);
  }
  // Health probes come every few seconds from load balancers: counted, not logged.
  if (!options.log_requests || l.endpoint == "health") return;
  Json line{{"event", "request"}, {"id", l.id},           {"method", req.method},
            {"path", req.path},   {"status", res.status}, {"outcome", outcome}};
  if (l.generation) {
    line["prompt_tokens"] = l.usage.prompt_tokens;
    line["cached_tokens"] = l.usage.cached_tokens;
    line["completion_tokens"] = l.usage.completion_tokens;
    line["finish"] = l.finish;
    if (l.ttft_ms >= 0) line["ttft_ms"] = static_cast<int64_t>(l.ttft_ms * 10) / 10.0;
  }
  line["duration_ms"] = static_cast<int64_t>(ms * 10) / 10.0;
  if (!l.error.empty()) line["error"] = l.error.substr(0, 300);
  const std::string text = DumpJson(line) + "\n";
  std::lock_guard<std::mutex> lock(log_mu);
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

void HttpServer::Impl::Routes() {
  http.set_pre_routing_handler([this](const Request& req, Response& res) {
    t_log = RequestLog{};
    t_log.start = Clock::now();
    t_log.id = NewId("req-");
    t_log.endpoint = std::string(EndpointOf(req.path));
    // A Content-Length that is not a number, or over the limit, is answered without reading the
    // body into memory (cpp-httplib would wait for all it claims): what the client is still
    // sending is dropped (at most kDrainBytes, until it pauses for a second) so that it reads
    // the answer rather than a connection reset, then the connection closes.
    if (req.has_header("Content-Length")) {
      const std::string v = req.get_header_value("Content-Length");
      const bool digits =
          !v.empty() && v.size() <= 19 && v.find_first_not_of("0123456789") == std::string::npos;
      if (!digits || std::stoull(v) > options.max_body_bytes) {
        if (digits) {
          ConnectionProbe(req.local_addr, req.local_port, req.remote_addr, req.remote_port)
              .Discard(std::min<uint64_t>(std::stoull(v), kDrainBytes), 1000);
        }
        res.set_header("Connection", "close");
        SetError(res, digits ? BodyTooLarge(options.max_body_bytes)
                             : MakeError(400, "Content-Length is not a number"));
        return httplib::Server::HandlerResponse::Handled;
      }
    }
    if (options.api_key.empty() || req.path == "/health" || req.path == "/" ||
        req.method == "OPTIONS") {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    std::string sent;
    const std::string auth = req.get_header_value("Authorization");
    if (auth.rfind("Bearer ", 0) == 0) {
      sent = auth.substr(7);
    } else if (req.has_header("x-api-key")) {
      sent = req.get_header_value("x-api-key");
    }
    if (!KeyMatches(sent, options.api_key)) {
      res.set_header("WWW-Authenticate", "Bearer");
      SetError(res, MakeError(401,
                              sent.empty() ? "missing API key: send Authorization: Bearer KEY"
                                           : "incorrect API key",
                              "authentication_error", "invalid_api_key"));
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });
  http.Get("/health", [this](const Request&, Response& res) {
    if (service.load() == nullptr) return SetJson(res, 503, Json{{"status", "loading"}});
    if (draining.load()) return SetJson(res, 503, Json{{"status", "draining"}});
    SetJson(res, 200, Json{{"status", "ok"}});
  });
  auto model_json = [this]() {
    return Json{{"id", options.model_id},
                {"object", "model"},
                {"created", started},
                {"owned_by", "vlstack"},
                {"max_model_len", capacity}};
  };
  http.Get("/v1/models", [model_json](const Request&, Response& res) {
    SetJson(res, 200, Json{{"object", "list"}, {"data", Json::array({model_json()})}});
  });
  http.Get(R"(/v1/models/(.+))", [this, model_json](const Request& req, Response& res) {
    if (req.matches[1] != options.model_id) {
      return SetError(res, MakeError(404, "model '" + req.matches[1].str() + "' does not exist",
                                     "invalid_request_error", "model_not_found"));
    }
    SetJson(res, 200, model_json());
  });
  http.Get("/metrics", [this](const Request&, Response& res) {
    const std::string text = metrics != nullptr ? metrics->Render(Gauges()) : std::string();
    res.set_content(text, "text/plain; version=0.0.4; charset=utf-8");
  });
  http.Get("/", [](const Request&, Response& res) {
    const std::string_view page = ChatPageHtml();
    res.set_header("Content-Security-Policy",
                   "default-src 'self'; img-src 'self' data: blob:; style-src 'self' "
                   "'unsafe-inline'; script-src 'self' 'unsafe-inline'");
    res.set_content(page.data(), page.size(), "text/html; charset=utf-8");
  });
  // The body is read here, within --max-body-mb whatever the framing (cpp-httplib 0.11 bounds
  // only bodies with a Content-Length; a chunked body is bounded by this reader).
  using BodyHandler = void (Impl::*)(const Request&, const std::string&, Response&);
  auto with_body = [this](BodyHandler fn) {
    return [this, fn](const Request& req, Response& res, const httplib::ContentReader& reader) {
      std::string body;
      size_t seen = 0;
      const size_t max = options.max_body_bytes;
      const bool complete = reader([&](const char* data, size_t n) {
        seen += n;
        if (seen <= max) {
          body.append(data, n);
        } else {
          body.clear();  // over the limit: read on (and discard) up to kDrainBytes more
          body.shrink_to_fit();
        }
        return seen <= max + kDrainBytes;
      });
      if (seen > max) {
        if (!complete) res.set_header("Connection", "close");
        return SetError(res, BodyTooLarge(max));
      }
      if (!complete) {
        res.set_header("Connection", "close");
        return SetError(res, MakeError(400, "the request body is incomplete"));
      }
      (this->*fn)(req, body, res);
    };
  };
  http.Post("/v1/chat/completions", with_body(&Impl::Chat));
  http.Post("/v1/completions", with_body(&Impl::Completions));
  http.Post("/tokenize", with_body(&Impl::Tokenize));
  http.Post("/detokenize", with_body(&Impl::Detokenize));

  http.set_error_handler([](const Request& req, Response& res) {
    if (!res.body.empty()) return;
    OpenAiError e;
    e.status = res.status;
    if (res.status == 404) {
      e.message = "no such endpoint: " + req.method + " " + req.path.substr(0, 200);
      e.code = "not_found";
    } else if (res.status == 413) {
      e.message = "the request body is too large";
      e.code = "body_too_large";
    } else if (res.status == 405) {
      e.message = "method not allowed";
    } else if (res.status >= 500) {
      e.type = "server_error";
      e.message = "internal server error";
    } else {
      e.message = "bad request";
    }
    SetError(res, e);
  });
  http.set_exception_handler([](const Request&, Response& res, const std::exception_ptr& ep) {
    std::string what = "unknown exception";
    try {
      std::rethrow_exception(ep);
    } catch (const std::bad_alloc&) {
      what = "out of memory";
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    SetError(res, MakeError(500, "internal error: " + what, "server_error"));
  });
  http.set_logger([this](const Request& req, const Response& res) { Log(req, res); });
}

HttpServer::HttpServer(HttpOptions options, ServerMetrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(options), metrics)) {
  Impl& m = *impl_;
  const size_t threads = static_cast<size_t>(std::max(4, m.options.http_threads));
  m.http.new_task_queue = [threads] { return new ElasticPool(threads); };
  m.http.set_payload_max_length(m.options.max_body_bytes + kDrainBytes);
  m.http.set_read_timeout(m.options.read_timeout_s, 0);
  m.http.set_write_timeout(m.options.write_timeout_s, 0);
  m.http.set_keep_alive_timeout(5);
  m.Routes();
}

HttpServer::~HttpServer() = default;

StatusOr<int> HttpServer::Bind() {
  Impl& m = *impl_;
  int port = m.options.port;
  if (port == 0) {
    port = m.http.bind_to_any_port(m.options.host);
    if (port < 0) port = -1;
  } else if (!m.http.bind_to_port(m.options.host, port)) {
    port = -1;
  }
  if (port < 0) {
    return IoError("cannot listen on " + m.options.host + ":" + std::to_string(m.options.port) +
                   " (address in use, not an address of this machine, or no permission)");
  }
  return port;
}

void HttpServer::SetReady(GenerationService* service, const ChatPipeline* pipeline, int capacity) {
  impl_->pipeline = pipeline;
  impl_->capacity = capacity;
  impl_->service.store(service);
}

Status HttpServer::Run() {
  if (!impl_->http.listen_after_bind()) {
    if (impl_->draining.load()) return Status::Ok();
    return IoError("the HTTP listener stopped unexpectedly");
  }
  return Status::Ok();
}

bool HttpServer::Drain(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  m.draining.store(true);
  bool clean = true;
  if (GenerationService* svc = m.service.load()) {
    svc->BeginDrain();
    clean = svc->WaitIdle(timeout);
    if (!clean) {
      svc->CancelAll();
      svc->WaitIdle(std::chrono::milliseconds(2000));
    }
  }
  // Let the answers finish writing (stopping the listener ends the streams), then stop.
  const Clock::time_point until = Clock::now() + std::chrono::seconds(5);
  while (m.answering.load() > 0 && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Stop();
  return clean;
}

void HttpServer::Stop() { impl_->http.stop(); }

}  // namespace vls::server
