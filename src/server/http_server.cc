#include "server/http_server.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <array>
#include <cstdio>
#include <ctime>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/chat_json.h"
#include "runtime/structured_output.h"
#include "runtime/structured_output_grammar.h"
#include "server/chat_page.h"
#include "server/http_transport.h"
#include "server/openai_response.h"
#include "server/tokenize_request.h"

namespace vls::server {
namespace {

using Json = nlohmann::ordered_json;
using ExchangePtr = std::shared_ptr<HttpExchange>;

double MsSince(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// One request's log line and metrics. Written by the thread computing the request; the line is
// written once both the response has ended (on the I/O thread) and the computation has returned.
struct RequestLog {
  std::string id;
  std::string request_id;  // the caller's X-Request-Id (a load balancer's), when valid
  Clock::time_point start = Clock::now();
  std::string endpoint = "other";
  std::string method, path;

  std::mutex mu;
  bool generation = false;  // a chat or completion was submitted
  bool cancelled = false;   // the client went away
  Usage usage;
  std::string finish;
  double ttft_ms = -1;
  // From the request's arrival to the end of its preparation (parsing, waiting for its turn on
  // the image encoder, decoding and encoding its images, tokenization); -1 before.
  double prepare_ms = -1;
  std::string error;
  int status = 0;
  int pending = 1;  // the response; +1 while a worker computes
};
using LogPtr = std::shared_ptr<RequestLog>;

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
  if (path == "/health" || path == "/health/live" || path == "/health/ready") return "health";
  if (path == "/metrics") return "metrics";
  return "other";
}

void SendJson(HttpExchange& ex, int status, const Json& body, const HeaderList& extra = {},
              bool close = false) {
  ex.Reply(status, "application/json", DumpJson(body), extra, close);
}

void SendError(HttpExchange& ex, RequestLog& log, const OpenAiError& e, HeaderList extra = {},
               bool close = false) {
  {
    std::lock_guard<std::mutex> lock(log.mu);
    log.error = e.message;
  }
  if (e.status == 429 || e.status == 503) extra.emplace_back("Retry-After", "1");
  SendJson(ex, e.status, ErrorBody(e), extra, close);
}

// Constant-time comparison of the key a client sent with ours (digests, so the length leaks
// nothing either).
bool KeyMatches(std::string_view sent, const std::string& key) {
  std::array<unsigned char, SHA256_DIGEST_LENGTH> a{}, b{};
  SHA256(reinterpret_cast<const unsigned char*>(sent.data()), sent.size(), a.data());
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), b.data());
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

// The caller's request id (X-Request-Id, set by a load balancer) when it is safe to log and echo:
// 1-128 characters of letters, digits and - _ . : / + = @. Empty otherwise.
std::string_view ValidRequestId(std::string_view id) {
  if (id.empty() || id.size() > 128) return {};
  for (char c : id) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("-_.:/+=@").find(c) != std::string_view::npos;
    if (!ok) return {};
  }
  return id;
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

// The routes: what each path takes. A method a route does not take is 405 (with Allow), from
// the header, without reading a body.
enum class Route {
  kNone,
  kHealth,  // /health and /health/ready: readiness
  kLive,    // /health/live: liveness
  kModels,
  kModel,
  kMetrics,
  kPage,
  kChat,
  kCompletions,
  kTokenize,
  kDetokenize
};

Route RouteOf(const std::string& path) {
  if (path == "/health" || path == "/health/ready") return Route::kHealth;
  if (path == "/health/live") return Route::kLive;
  if (path == "/v1/models") return Route::kModels;
  if (path.rfind("/v1/models/", 0) == 0 && path.size() > 11) return Route::kModel;
  if (path == "/metrics") return Route::kMetrics;
  if (path == "/") return Route::kPage;
  if (path == "/v1/chat/completions") return Route::kChat;
  if (path == "/v1/completions") return Route::kCompletions;
  if (path == "/tokenize") return Route::kTokenize;
  if (path == "/detokenize") return Route::kDetokenize;
  return Route::kNone;
}

bool TakesBody(Route r) {
  return r == Route::kChat || r == Route::kCompletions || r == Route::kTokenize ||
         r == Route::kDetokenize;
}

}  // namespace

struct HttpServer::Impl : TransportHandler {
  HttpOptions options;
  ServerMetrics* metrics;
  std::unique_ptr<HttpTransport> transport;
  std::atomic<GenerationService*> service{nullptr};
  const ChatPipeline* pipeline = nullptr;
  const ImageEncoder* images = nullptr;  // set with pipeline, before service is published
  int capacity = 0;
  // OpenAI's system_fingerprint, from the model's identity: computed once at SetReady (without
  // an artifact the identity hashes every weight).
  std::string fingerprint;
  std::atomic<bool> draining{false};
  std::atomic<int> answering{0};  // generations whose answer is not fully written
  int64_t started = static_cast<int64_t>(std::time(nullptr));
  std::mutex log_mu;

  Impl(HttpOptions o, ServerMetrics* m) : options(std::move(o)), metrics(m) {}

  HeadDecision OnHead(const ExchangePtr& ex) override;
  void OnRefused(const RequestHead& head, int status, std::string_view why) override;

  // A full queue's 429 as --overload-status says (503 behind a balancer that retries on it).
  OpenAiError Overloaded(OpenAiError e) const {
    if (e.status == 429 && options.overload_status == 503) {
      e.status = 503;
      e.type = "server_error";
      e.code = "overloaded";
    }
    return e;
  }
  // Answers 503 (and returns null) while loading or draining.
  GenerationService* Open(HttpExchange& ex, RequestLog& log);
  bool ParseBody(HttpExchange& ex, RequestLog& log, Json* body);
  void Chat(HttpExchange& ex, RequestLog& log);
  void Completions(HttpExchange& ex, RequestLog& log);
  void Tokenize(HttpExchange& ex, RequestLog& log);
  void Detokenize(HttpExchange& ex, RequestLog& log);
  template <typename Responder>
  void Generate(HttpExchange& ex, RequestLog& log, GenerationService& svc, PreparedChat chat,
                QueueTicket ticket, std::unique_ptr<Responder> responder, bool stream);
  // The request's place in the queue, taken before its images decode (they count against
  // --max-queue); null after an answer (429 full, 503 draining).
  std::optional<QueueTicket> Reserve(HttpExchange& ex, RequestLog& log, GenerationService& svc);
  void AnswerGet(HttpExchange& ex, RequestLog& log, Route route);
  // One of the request's two ends (the response, the computation); the last writes the line.
  void Finish(const LogPtr& log);
  void WriteLog(RequestLog& log);
  GaugeValues Gauges() const;
};

GenerationService* HttpServer::Impl::Open(HttpExchange& ex, RequestLog& log) {
  GenerationService* svc = service.load();
  if (svc == nullptr) {
    SendError(ex, log, MakeError(503, "the model is still loading", "server_error", "loading"));
    return nullptr;
  }
  if (draining.load()) {
    SendError(ex, log, MakeError(503, "the server is shutting down", "server_error", "draining"),
              {}, true);
    return nullptr;
  }
  return svc;
}

bool HttpServer::Impl::ParseBody(HttpExchange& ex, RequestLog& log, Json* body) {
  Status s = ParseUntrustedOrderedJson("request body", ex.body(), body);
  if (!s.ok()) {
    SendError(ex, log, MakeError(400, s.message()));
    return false;
  }
  if (!body->is_object()) {
    SendError(ex, log, MakeError(400, "the request body must be a JSON object"));
    return false;
  }
  return true;
}

std::optional<QueueTicket> HttpServer::Impl::Reserve(HttpExchange& ex, RequestLog& log,
                                                     GenerationService& svc) {
  auto ticket = svc.Reserve();
  if (!ticket.ok()) {
    SendError(ex, log, Overloaded(ErrorFromStatus(ticket.status())));
    return std::nullopt;
  }
  return std::move(*ticket);
}

namespace {

// "The client hung up", for work before the request reaches the engine (image decoding): the
// connection is looked at most every 50 ms however often it is asked.
std::function<bool()> ClientGone(HttpExchange& ex) {
  auto last = std::make_shared<Clock::time_point>();
  auto gone = std::make_shared<bool>(false);
  return [&ex, last, gone] {
    const Clock::time_point now = Clock::now();
    if (!*gone && now - *last >= std::chrono::milliseconds(50)) {
      *last = now;
      *gone = ex.PeerGone();
    }
    return *gone;
  };
}

// What a structured request asks for, counted once it is admitted (its grammar compiled).
void CountStructured(ServerMetrics* metrics, const StructuredOutput& so) {
  if (metrics == nullptr) return;
  using Kind = StructuredOutput::Kind;
  switch (so.kind) {
    case Kind::kJsonObject: metrics->CountStructured(StructuredKind::kJsonObject); break;
    case Kind::kJsonSchema: metrics->CountStructured(StructuredKind::kJsonSchema); break;
    case Kind::kGbnf: metrics->CountStructured(StructuredKind::kGrammar); break;
    case Kind::kRegex: metrics->CountStructured(StructuredKind::kRegex); break;
    case Kind::kNone: break;
  }
  if (so.tools != StructuredOutput::Tools::kFree) metrics->CountStructured(StructuredKind::kTools);
}

// A request whose preparation failed: Cancelled (the client hung up during it) is logged as
// cancelled; anything else is answered.
void PrepareFailed(HttpExchange& ex, RequestLog& log, const Status& s) {
  if (s.code() == StatusCode::kCancelled) {
    {
      std::lock_guard<std::mutex> lock(log.mu);
      log.cancelled = true;
    }
    return SendError(ex, log,
                     MakeError(499, "the request was cancelled: " + s.message(),
                               "invalid_request_error", "cancelled"));
  }
  SendError(ex, log, ErrorFromStatus(s));
}

}  // namespace

template <typename Responder>
void HttpServer::Impl::Generate(HttpExchange& ex, RequestLog& log, GenerationService& svc,
                                PreparedChat chat, QueueTicket ticket,
                                std::unique_ptr<Responder> responder, bool stream) {
  auto submitted = svc.Submit(std::move(chat), std::move(ticket));
  if (!submitted.ok()) return SendError(ex, log, Overloaded(ErrorFromStatus(submitted.status())));
  ActiveGuard guard(&answering);
  std::shared_ptr<RequestHandle> handle = std::move(*submitted);
  auto note = [&](const Responder& r, bool cancelled) {
    std::lock_guard<std::mutex> lock(log.mu);
    log.generation = true;
    log.cancelled = log.cancelled || cancelled || r.finish() == FinishReason::kCancelled;
    log.usage = r.usage();
    log.finish = FinishReasonName(r.finish());
    if (auto first = handle->first_token()) {
      log.ttft_ms = std::chrono::duration<double, std::milli>(*first - handle->submitted()).count();
    }
    if (r.finish() == FinishReason::kError) log.error = r.error();
  };
  std::vector<OutputPiece> pieces;
  if (!stream) {
    bool end = false;
    bool gone = false;
    while (!end) {
      end = handle->Take(&pieces, std::chrono::milliseconds(100));
      for (const OutputPiece& p : pieces) responder->Collect(p);
      pieces.clear();
      if (!end && !gone && ex.PeerGone()) {
        svc.Cancel(*handle);
        gone = true;
      }
    }
    note(*responder, gone);
    if (responder->finish() == FinishReason::kError) {
      SendError(ex, log,
                MakeError(500, "generation failed: " + responder->error(), "server_error"));
    } else if (responder->finish() == FinishReason::kCancelled) {
      SendError(ex, log,
                MakeError(499, "the request was cancelled", "invalid_request_error", "cancelled"));
    } else {
      SendJson(ex, 200, responder->Completion());
    }
    return;
  }

  ex.BeginStream(200, "text/event-stream",
                 {{"Cache-Control", "no-cache"}, {"X-Accel-Buffering", "no"}});
  bool end = false;
  while (!end) {
    end = handle->Take(&pieces, std::chrono::milliseconds(100));
    std::string out;
    for (const OutputPiece& p : pieces) {
      for (const std::string& payload : responder->StreamPiece(p))
        out += "data: " + payload + "\n\n";
    }
    pieces.clear();
    if (end) {
      for (const std::string& payload : responder->StreamEnd()) out += "data: " + payload + "\n\n";
      if (responder->finish() != FinishReason::kCancelled) out += "data: [DONE]\n\n";
    }
    // Write() blocks while the client is behind (backpressure) and is false once it is gone; a
    // client that closed is seen at once by PeerGone() even while the kernel still buffers.
    if ((!out.empty() && !ex.Write(out)) || (!end && ex.PeerGone())) {
      svc.Cancel(*handle);
      std::vector<OutputPiece> rest;  // the pieces up to the cancelled one, for the log
      handle->Take(&rest, std::chrono::milliseconds(0));
      for (const OutputPiece& p : rest) responder->StreamPiece(p);
      note(*responder, true);
      ex.EndStream();
      return;
    }
  }
  note(*responder, false);
  ex.EndStream();
}

void HttpServer::Impl::Chat(HttpExchange& ex, RequestLog& log) {
  GenerationService* svc = Open(ex, log);
  if (svc == nullptr) return;
  Json body;
  if (!ParseBody(ex, log, &body)) return;
  auto parsed = ParseChatCompletionRequest(body, pipeline->generation_defaults(), options.limits);
  if (!parsed.ok()) return SendError(ex, log, ErrorFromStatus(parsed.status()));
  std::optional<QueueTicket> ticket = Reserve(ex, log, *svc);
  if (!ticket) return;
  auto prepared = pipeline->Prepare(parsed->chat, ClientGone(ex));
  if (!prepared.ok()) return PrepareFailed(ex, log, prepared.status());
  CountStructured(metrics, parsed->chat.structured);
  ResponseMeta meta{NewId("chatcmpl-"), ResponseModelName(parsed->model, options.model_id),
                    static_cast<int64_t>(std::time(nullptr)), fingerprint};
  {
    std::lock_guard<std::mutex> lock(log.mu);
    log.id = meta.id;
    log.prepare_ms = std::chrono::duration<double, std::milli>(Clock::now() - log.start).count();
  }
  auto responder = std::make_unique<ChatResponder>(*parsed, meta, &pipeline->tokenizer());
  Generate(ex, log, *svc, std::move(*prepared), std::move(*ticket), std::move(responder),
           parsed->stream);
}

void HttpServer::Impl::Completions(HttpExchange& ex, RequestLog& log) {
  GenerationService* svc = Open(ex, log);
  if (svc == nullptr) return;
  Json body;
  if (!ParseBody(ex, log, &body)) return;
  auto parsed = ParseCompletionRequest(body, pipeline->generation_defaults(), options.limits);
  if (!parsed.ok()) return SendError(ex, log, ErrorFromStatus(parsed.status()));
  std::optional<QueueTicket> ticket = Reserve(ex, log, *svc);
  if (!ticket) return;
  auto prepared = parsed->prompt ? pipeline->PrepareText(*parsed->prompt, parsed->params)
                                 : pipeline->PrepareTokens(*parsed->tokens, parsed->params);
  if (!prepared.ok()) return PrepareFailed(ex, log, prepared.status());
  CountStructured(metrics, parsed->params.structured);
  ResponseMeta meta{NewId("cmpl-"), ResponseModelName(parsed->model, options.model_id),
                    static_cast<int64_t>(std::time(nullptr)), fingerprint};
  {
    std::lock_guard<std::mutex> lock(log.mu);
    log.id = meta.id;
    log.prepare_ms = std::chrono::duration<double, std::milli>(Clock::now() - log.start).count();
  }
  auto responder = std::make_unique<CompletionResponder>(*parsed, meta, &pipeline->tokenizer());
  Generate(ex, log, *svc, std::move(*prepared), std::move(*ticket), std::move(responder),
           parsed->stream);
}

void HttpServer::Impl::Tokenize(HttpExchange& ex, RequestLog& log) {
  if (Open(ex, log) == nullptr) return;
  Json body;
  if (!ParseBody(ex, log, &body)) return;
  auto parsed = ParseTokenizeRequest(body, pipeline->generation_defaults());
  if (!parsed.ok()) return SendError(ex, log, ErrorFromStatus(parsed.status()));
  std::string text;
  if (parsed->text) {
    text = std::move(*parsed->text);
  } else {
    auto rendered = pipeline->Render(*parsed->chat);
    if (!rendered.ok()) return SendError(ex, log, ErrorFromStatus(rendered.status()));
    text = std::move(*rendered);
  }
  auto ids = pipeline->tokenizer().Encode(text);
  if (!ids.ok()) return SendError(ex, log, ErrorFromStatus(ids.status()));
  SendJson(ex, 200, Json{{"tokens", *ids}, {"count", ids->size()}, {"max_model_len", capacity}});
}

void HttpServer::Impl::Detokenize(HttpExchange& ex, RequestLog& log) {
  if (Open(ex, log) == nullptr) return;
  Json body;
  if (!ParseBody(ex, log, &body)) return;
  auto ids = ParseDetokenizeRequest(body, pipeline->tokenizer().id_limit());
  if (!ids.ok()) return SendError(ex, log, ErrorFromStatus(ids.status()));
  const std::string text = pipeline->tokenizer().Decode(*ids);
  SendJson(ex, 200, Json{{"prompt", text}, {"content", text}});
}

void HttpServer::Impl::AnswerGet(HttpExchange& ex, RequestLog& log, Route route) {
  auto model_json = [this]() {
    return Json{{"id", options.model_id},
                {"object", "model"},
                {"created", started},
                {"owned_by", "vlstack"},
                {"max_model_len", capacity}};
  };
  switch (route) {
    case Route::kHealth:
    case Route::kLive: {
      // Live: the process answers. Ready: it takes new work (loaded, not draining).
      const char* state = service.load() == nullptr ? "loading"
                          : draining.load()         ? "draining"
                                                    : "ok";
      const bool ready = std::string_view(state) == "ok";
      const int status = route == Route::kLive || ready ? 200 : 503;
      return SendJson(ex, status, Json{{"status", state}, {"live", true}, {"ready", ready}});
    }
    case Route::kModels:
      return SendJson(ex, 200, Json{{"object", "list"}, {"data", Json::array({model_json()})}});
    case Route::kModel: {
      const std::string name = ex.head().path.substr(11);
      if (name != options.model_id) {
        OpenAiError e = MakeError(404, "model '" + name.substr(0, 200) + "' does not exist",
                                  "invalid_request_error", "model_not_found");
        return SendError(ex, log, e);
      }
      return SendJson(ex, 200, model_json());
    }
    case Route::kMetrics: {
      const std::string text = metrics != nullptr ? metrics->Render(Gauges()) : std::string();
      return ex.Reply(200, "text/plain; version=0.0.4; charset=utf-8", text);
    }
    case Route::kPage: {
      const std::string_view page = ChatPageHtml();
      return ex.Reply(200, "text/html; charset=utf-8", std::string(page),
                      {{"Content-Security-Policy",
                        "default-src 'self'; img-src 'self' data: blob:; media-src 'self' "
                        "data: blob:; style-src 'self' 'unsafe-inline'; script-src 'self' "
                        "'unsafe-inline'"}});
    }
    default: break;
  }
}

HeadDecision HttpServer::Impl::OnHead(const ExchangePtr& ex) {
  const RequestHead& h = ex->head();
  auto log = std::make_shared<RequestLog>();
  log->id = NewId("req-");
  log->endpoint = std::string(EndpointOf(h.path));
  log->method = h.method.substr(0, 16);
  log->path = h.path.substr(0, 200);
  log->request_id = std::string(ValidRequestId(h.Header("X-Request-Id")));
  ex->AddHeader("X-Request-Id", log->request_id.empty() ? log->id : log->request_id);
  ex->OnDone([this, log](int status, bool /*complete*/) {
    {
      std::lock_guard<std::mutex> lock(log->mu);
      log->status = status;
      if (status == 0) log->cancelled = true;
    }
    Finish(log);
  });
  const Route route = RouteOf(h.path);
  const bool is_get = h.method == "GET" || h.method == "HEAD";
  if (h.method == "OPTIONS") {
    ex->Reply(204, "", "", {{"Allow", TakesBody(route) ? "POST, OPTIONS" : "GET, HEAD, OPTIONS"}});
    return {};
  }
  // Authentication first: nothing about the routes is told to a client without the key.
  if (!options.api_key.empty() && route != Route::kHealth && route != Route::kLive &&
      route != Route::kPage) {
    std::string_view sent;
    const std::string_view auth = h.Header("Authorization");
    if (auth.size() >= 7 && auth.substr(0, 7) == "Bearer ") {
      sent = auth.substr(7);
    } else if (h.HasHeader("x-api-key")) {
      sent = h.Header("x-api-key");
    }
    if (!KeyMatches(sent, options.api_key)) {
      SendError(*ex, *log,
                MakeError(401,
                          sent.empty() ? "missing API key: send Authorization: Bearer KEY"
                                       : "incorrect API key",
                          "authentication_error", "invalid_api_key"),
                {{"WWW-Authenticate", "Bearer"}});
      return {};
    }
  }
  if (route == Route::kNone) {
    SendError(*ex, *log,
              MakeError(404, "no such endpoint: " + h.method.substr(0, 16) + " " + log->path,
                        "invalid_request_error", "not_found"));
    return {};
  }
  if (TakesBody(route) ? h.method != "POST" : !is_get) {
    SendError(*ex, *log,
              MakeError(405, "method " + h.method.substr(0, 16) + " is not allowed on " + h.path),
              {{"Allow", TakesBody(route) ? "POST, OPTIONS" : "GET, HEAD, OPTIONS"}});
    return {};
  }
  if (!TakesBody(route)) {
    AnswerGet(*ex, *log, route);
    return {};
  }
  // Loading or draining: 503 from the header, the body unread.
  if (Open(*ex, *log) == nullptr) return {};
  {
    std::lock_guard<std::mutex> lock(log->mu);
    ++log->pending;
  }
  HeadDecision d;
  d.body_limit = options.max_body_bytes;
  d.run = [this, log, route](const ExchangePtr& x) {
    try {
      switch (route) {
        case Route::kChat: Chat(*x, *log); break;
        case Route::kCompletions: Completions(*x, *log); break;
        case Route::kTokenize: Tokenize(*x, *log); break;
        default: Detokenize(*x, *log); break;
      }
    } catch (const std::bad_alloc&) {
      SendError(*x, *log, MakeError(500, "internal error: out of memory", "server_error"));
    } catch (const std::exception& e) {
      SendError(*x, *log,
                MakeError(500, std::string("internal error: ") + e.what(), "server_error"));
    }
    Finish(log);
  };
  return d;
}

void HttpServer::Impl::OnRefused(const RequestHead& head, int status, std::string_view why) {
  auto log = std::make_shared<RequestLog>();
  log->id = NewId("req-");
  log->endpoint = std::string(EndpointOf(head.path));
  log->method = head.method.substr(0, 16);
  log->path = head.path.substr(0, 200);
  log->request_id = std::string(ValidRequestId(head.Header("X-Request-Id")));
  log->status = status;
  log->error = std::string(why);
  if (status == 0) log->cancelled = true;
  WriteLog(*log);
}

void HttpServer::Impl::Finish(const LogPtr& log) {
  {
    std::lock_guard<std::mutex> lock(log->mu);
    if (--log->pending > 0) return;
  }
  WriteLog(*log);
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
    g.engine_steps = l.steps;
    g.prefill_chunks = l.prefill_chunks;
    g.mixed_passes = l.mixed_passes;
    g.copied_prefixes = l.copied_prefixes;
    g.kv_preemptions = l.kv_preemptions;
    g.kv_evictions = l.kv_evictions;
    g.kv_blocks = l.kv_blocks;
    g.kv_blocks_used = l.kv_blocks_used;
    g.prefix_cache_blocks = l.prefix_cache_blocks;
    g.kv_blocks_cached = l.kv_blocks_cached;
    if (images != nullptr) {
      const ImageEncoder::Stats st = images->stats();
      g.videos = static_cast<int64_t>(st.videos);
      g.video_frames = static_cast<int64_t>(st.video_frames);
      g.video_decode_seconds = st.video_decode_seconds;
      g.video_preprocess_seconds = st.video_preprocess_seconds;
      g.video_encode_seconds = st.video_encode_seconds;
      g.encoder_jobs = static_cast<int64_t>(st.paced_jobs);
      g.encoder_queue_seconds = st.paced_queued_seconds;
      g.encoder_paced_wait_seconds = st.paced_wait_seconds;
    }
    const GrammarCache& grammars = pipeline->grammar_cache();
    g.grammar_cache_hits = static_cast<int64_t>(grammars.hits());
    g.grammar_cache_misses = static_cast<int64_t>(grammars.misses());
  }
  g.draining = draining.load() ? 1 : 0;
  return g;
}

void HttpServer::Impl::WriteLog(RequestLog& l) {
  std::lock_guard<std::mutex> lock(l.mu);
  std::string outcome = "ok";
  if (l.cancelled) {
    outcome = "cancelled";
  } else if (l.status == 429 || l.status == 503) {
    outcome = "rejected";
  } else if (l.status >= 500) {
    outcome = "server_error";
  } else if (l.status >= 400) {
    outcome = "client_error";
  }
  const double ms = MsSince(l.start);
  if (metrics != nullptr) {
    metrics->CountRequest(l.endpoint, outcome);
    if (l.generation) metrics->ObserveRequestDuration(ms / 1e3);
  }
  // Health probes come every few seconds from load balancers: counted, not logged.
  if (!options.log_requests || l.endpoint == "health") return;
  Json line{{"event", "request"}, {"id", l.id}};
  if (!l.request_id.empty()) line["request_id"] = l.request_id;
  line["method"] = l.method;
  line["path"] = l.path;
  line["status"] = l.status;
  line["outcome"] = outcome;
  if (l.generation) {
    line["prompt_tokens"] = l.usage.prompt_tokens;
    line["cached_tokens"] = l.usage.cached_tokens;
    line["completion_tokens"] = l.usage.completion_tokens;
    line["finish"] = l.finish;
    if (l.prepare_ms >= 0) line["prepare_ms"] = static_cast<int64_t>(l.prepare_ms * 10) / 10.0;
    if (l.ttft_ms >= 0) line["ttft_ms"] = static_cast<int64_t>(l.ttft_ms * 10) / 10.0;
  }
  line["duration_ms"] = static_cast<int64_t>(ms * 10) / 10.0;
  if (!l.error.empty()) line["error"] = l.error.substr(0, 300);
  const std::string text = DumpJson(line) + "\n";
  std::lock_guard<std::mutex> out(log_mu);
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

HttpServer::HttpServer(HttpOptions options, ServerMetrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(options), metrics)) {
  Impl& m = *impl_;
  TransportOptions t;
  t.host = m.options.host;
  t.port = m.options.port;
  t.backlog = m.options.backlog;
  t.max_workers = static_cast<size_t>(std::max(4, m.options.http_threads));
  t.max_connections = std::max<size_t>(4096, t.max_workers);
  t.header_timeout = std::chrono::seconds(m.options.read_timeout_s);
  t.read_timeout = std::chrono::seconds(m.options.read_timeout_s);
  t.write_timeout = std::chrono::seconds(m.options.write_timeout_s);
  m.transport = std::make_unique<HttpTransport>(t, &m);
}

HttpServer::~HttpServer() = default;

StatusOr<int> HttpServer::Bind() { return impl_->transport->Bind(); }

void HttpServer::SetReady(GenerationService* service, const ChatPipeline* pipeline, int capacity,
                          const ImageEncoder* images) {
  impl_->pipeline = pipeline;
  impl_->images = images;
  impl_->capacity = capacity;
  impl_->fingerprint = pipeline->fingerprint();
  impl_->service.store(service);
}

Status HttpServer::Run() { return impl_->transport->Run(); }

bool HttpServer::Drain(std::chrono::milliseconds timeout) {
  Impl& m = *impl_;
  m.draining.store(true);
  m.transport->BeginDrain();  // idle and half-sent connections close now
  bool clean = true;
  if (GenerationService* svc = m.service.load()) {
    svc->BeginDrain();
    clean = svc->WaitIdle(timeout);
    if (!clean) {
      svc->CancelAll();
      svc->WaitIdle(std::chrono::milliseconds(2000));
    }
  }
  // Until now a new connection (a balancer's health check) read "draining"; from now on it is
  // refused.
  m.transport->CloseListener();
  // Let the answers finish writing (bounded: a client that reads nothing is dropped), then stop.
  const Clock::time_point until = Clock::now() + std::chrono::seconds(5);
  while ((m.answering.load() > 0 || m.transport->connections() > 0) && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Stop();
  return clean;
}

void HttpServer::Stop() { impl_->transport->Stop(); }

}  // namespace vls::server
