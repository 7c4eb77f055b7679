#include "server/http_transport.h"

#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <array>
#include <atomic>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <limits>
#include <mutex>
#include <optional>
#include <unordered_set>

#include "server/http_framing.h"
#include "server/worker_pool.h"

namespace vls::server {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

std::string_view ReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 417: return "Expectation Failed";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 499: return "Client Closed Request";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return status < 400 ? "OK" : (status < 500 ? "Bad Request" : "Server Error");
  }
}

namespace {

// A lingering close after a malformed request (bad framing, an endless line) drops this much.
constexpr size_t kLingerAfterBadBytes = size_t{64} << 10;

// The response head: status line, headers, framing. Header values are the server's own; a CR or
// LF in one (a programming error) is dropped rather than sent.
std::string ResponseHead(int status, std::string_view content_type, const HeaderList& extra,
                         std::optional<size_t> length, bool chunked, bool close) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " ";
  out += ReasonPhrase(status);
  out += "\r\n";
  auto add = [&out](std::string_view k, std::string_view v) {
    if (k.find_first_of("\r\n:") != std::string_view::npos) return;
    if (v.find_first_of("\r\n") != std::string_view::npos) return;
    out.append(k).append(": ").append(v).append("\r\n");
  };
  if (!content_type.empty()) add("Content-Type", content_type);
  for (const auto& [k, v] : extra) add(k, v);
  if (length) add("Content-Length", std::to_string(*length));
  if (chunked) add("Transfer-Encoding", "chunked");
  if (close) add("Connection", "close");
  out += "\r\n";
  return out;
}

// A JSON error body of the transport's own refusals (OpenAI-shaped, like the handler's).
std::string ErrorJson(int status, std::string_view message) {
  std::string m;
  for (char c : message) {
    if (c == '"' || c == '\\') m += '\\';
    if (static_cast<unsigned char>(c) >= 0x20) m += c;
  }
  return R"({"error":{"message":")" + m + R"(","type":")" +
         (status >= 500 ? "server_error" : "invalid_request_error") +
         R"(","param":null,"code":null}})";
}

}  // namespace

class Session;

struct HttpTransport::Impl {
  TransportOptions options;
  TransportHandler* handler;
  net::io_context ioc{1};
  tcp::acceptor acceptor{ioc};
  net::steady_timer accept_retry{ioc};
  WorkerPool workers;
  std::unordered_set<Session*> sessions;  // I/O thread only
  std::atomic<size_t> open{0};
  std::atomic<bool> draining{false};  // set on the I/O thread, read by writers too
  bool stopped = false;               // I/O thread only

  Impl(TransportOptions o, TransportHandler* h)
      : options(std::move(o)), handler(h), workers(options.max_workers) {}

  void Accept();
};

// One connection. Everything but the output queue and PeerGone() runs on the I/O thread.
class Session : public std::enable_shared_from_this<Session> {
 public:
  enum class State { kIdle, kHeader, kBody, kHandling, kLinger, kClosed };

  Session(HttpTransport::Impl* t, tcp::socket socket)
      : t_(t), stream_(std::move(socket)), buffer_(t->options.max_header_bytes + 4096) {
    beast::error_code ec;
    stream_.socket().set_option(tcp::no_delay(true), ec);
    const tcp::endpoint ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = ep.address().to_string() + ":" + std::to_string(ep.port());
  }
  ~Session() { t_->open.fetch_sub(1); }

  void Start(bool busy) {
    t_->open.fetch_add(1);
    t_->sessions.insert(this);
    if (busy) return Refuse(503, "the server has too many connections open", false);
    WaitForRequest();
  }

  State state() const { return state_; }
  // SIGTERM: what is not being answered ends now.
  void OnDrain() {
    if (state_ == State::kIdle || state_ == State::kHeader || state_ == State::kBody ||
        state_ == State::kLinger) {
      Close();
    }
  }
  void Close();

  // The output side, from any thread.
  bool Queue(std::string_view bytes, bool end, bool close);
  bool WaitForRoom();
  bool PeerGone();
  void SetDone(std::function<void(int, bool)> done, int status) {
    std::lock_guard<std::mutex> lock(out_mu_);
    done_ = std::move(done);
    status_ = status;
  }
  void SetStatus(int status) {
    std::lock_guard<std::mutex> lock(out_mu_);
    status_ = status;
  }
  bool BodyRead() const { return body_read_; }
  bool Draining() const { return t_->draining.load(); }
  const TransportOptions& options() const { return t_->options; }

 private:
  void WaitForRequest();
  void ReadHeader();
  void OnHeader(beast::error_code ec);
  void ReadBody();
  void OnBody(beast::error_code ec);
  void Dispatch();
  void WriteMore();
  void WriteSome();
  void FinishResponse(bool complete);
  void Refuse(int status, std::string_view why, bool log);
  void Linger();
  void LingerRead();
  void Done(bool complete);

  HttpTransport::Impl* t_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  State state_ = State::kIdle;
  std::string remote_;
  RequestHead head_;
  std::shared_ptr<HttpExchange> exchange_;  // the request being answered
  std::function<void(std::shared_ptr<HttpExchange>)> run_;
  bool body_read_ = true;    // the request's body (if any) was consumed
  bool keep_alive_ = false;  // the request allows another on this connection
  bool served_ = false;      // a response was written on this connection
  std::string out_buf_;      // being written (I/O thread)
  size_t out_done_ = 0;      // ... of which the kernel has taken this much
  std::array<char, 16384> scratch_{};
  size_t linger_left_ = 0;
  // What a lingering close drops at most: a body a client may still be sending after a refusal
  // by the handler (options.linger_bytes), but little after bytes that are not HTTP.
  size_t linger_limit_ = 0;
  Clock::time_point linger_until_;

  std::mutex out_mu_;
  std::condition_variable out_cv_;
  std::string pending_;   // queued, not yet written
  size_t in_flight_ = 0;  // being written
  bool writing_ = false;
  bool end_ = false;    // the response's last bytes are queued
  bool close_ = false;  // ... and the connection ends after them
  bool gone_ = false;   // the connection failed or was closed: nothing more is written
  int status_ = 0;
  std::function<void(int, bool)> done_;
};

namespace {

class Exchange final : public HttpExchange {
 public:
  Exchange(std::shared_ptr<Session> s, RequestHead head)
      : s_(std::move(s)), head_(std::move(head)) {}

  const RequestHead& head() const override { return head_; }
  const std::string& body() const override { return body_; }
  std::string* mutable_body() { return &body_; }

  void Reply(int status, std::string_view content_type, std::string body, const HeaderList& extra,
             bool close) override {
    close = close || MustClose() || s_->Draining();
    s_->SetStatus(status);
    const bool no_body = status == 204 || status == 304;
    std::string out =
        ResponseHead(status, content_type, WithCommon(extra),
                     no_body ? std::nullopt : std::optional<size_t>(body.size()), false, close);
    if (head_.method != "HEAD" && !no_body) out += body;
    s_->Queue(std::move(out), /*end=*/true, close);
  }

  void BeginStream(int status, std::string_view content_type, const HeaderList& extra) override {
    chunked_ = head_.version >= 11;
    const bool close = !chunked_ || MustClose() || s_->Draining();
    s_->SetStatus(status);
    close_ = close;
    s_->Queue(ResponseHead(status, content_type, WithCommon(extra), std::nullopt, chunked_, close),
              false, close);
  }

  bool Write(std::string_view data) override {
    if (data.empty()) return !s_->PeerGone();
    std::string out;
    if (chunked_) {
      char size[24];
      std::snprintf(size, sizeof(size), "%zx\r\n", data.size());
      out.append(size).append(data).append("\r\n");
    } else {
      out.assign(data);
    }
    return s_->Queue(std::move(out), false, close_) && s_->WaitForRoom();
  }

  void EndStream() override { s_->Queue(chunked_ ? "0\r\n\r\n" : "", true, close_); }

  bool PeerGone() const override { return s_->PeerGone(); }

  void OnDone(std::function<void(int, bool)> done) override { s_->SetDone(std::move(done), 0); }

  void AddHeader(std::string name, std::string value) override {
    common_.emplace_back(std::move(name), std::move(value));
  }

 private:
  HeaderList WithCommon(const HeaderList& extra) const {
    HeaderList all = common_;
    all.insert(all.end(), extra.begin(), extra.end());
    return all;
  }
  // A request whose body was not read ends the connection after its answer.
  bool MustClose() const { return head_.has_body && !s_->BodyRead(); }

  std::shared_ptr<Session> s_;
  RequestHead head_;
  std::string body_;
  HeaderList common_;
  bool chunked_ = true;
  bool close_ = false;
};

}  // namespace

void Session::WaitForRequest() {
  state_ = State::kIdle;
  // Draining: a connection made since answers one request (the health check's "draining").
  if (t_->stopped || (t_->draining && served_)) return Close();
  if (buffer_.size() > 0) return ReadHeader();  // a pipelined request is already here
  // The keep-alive wait: up to idle_timeout for the first byte of the next request.
  stream_.expires_after(t_->options.idle_timeout);
  auto self = shared_from_this();
  stream_.async_read_some(buffer_.prepare(4096), [self](beast::error_code ec, size_t n) {
    if (self->state_ == State::kClosed) return;
    if (ec) return self->Close();  // timed out, closed by the client, or stopped
    self->buffer_.commit(n);
    self->ReadHeader();
  });
}

void Session::ReadHeader() {
  state_ = State::kHeader;
  linger_limit_ = 0;
  parser_.emplace();
  parser_->header_limit(static_cast<std::uint32_t>(t_->options.max_header_bytes));
  // Content-Length is checked after the header, by us (Boost 1.74 compares a Content-Length
  // with an unset limit as over it, so the "no limit" is the largest value).
  parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
  // The whole header within header_timeout of its first byte: a trickling client is dropped.
  stream_.expires_after(t_->options.header_timeout);
  auto self = shared_from_this();
  http::async_read_header(stream_, buffer_, *parser_, [self](beast::error_code ec, size_t) {
    if (self->state_ == State::kClosed) return;
    self->OnHeader(ec);
  });
}

void Session::OnHeader(beast::error_code ec) {
  head_ = RequestHead{};
  head_.remote = remote_;
  if (ec) {
    if (ec == beast::error::timeout)
      return Refuse(408, "the request header did not arrive in time", true);
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == net::error::connection_reset || ec == http::error::partial_message) {
      return Close();
    }
    if (ec == http::error::header_limit || ec == http::error::buffer_overflow) {
      return Refuse(431, "the request header is larger than the server allows", true);
    }
    if (ec == http::error::bad_version) return Refuse(505, "unsupported HTTP version", true);
    return Refuse(400, "malformed HTTP request: " + ec.message(), true);
  }
  const auto& msg = parser_->get();
  const bool has_body = parser_->chunked() || parser_->content_length().value_or(0) > 0;
  head_ = HeadOf(msg.base(), has_body);
  head_.remote = remote_;
  // RFC 9112 framing, strictly: what a proxy in front of us might read differently is refused.
  if (const FramingVerdict v = CheckFraming(msg.base()); v.status != 0) {
    return Refuse(v.status, v.why, true);
  }
  keep_alive_ = msg.keep_alive();
  body_read_ = !head_.has_body;

  auto ex = std::make_shared<Exchange>(shared_from_this(), head_);
  exchange_ = ex;
  state_ = State::kHandling;
  HeadDecision d = t_->handler->OnHead(ex);
  if (!d.run) return;  // answered from the header
  run_ = std::move(d.run);
  const auto length = parser_->content_length();
  if (length && *length > d.body_limit) {
    // Answered by the handler's body-size rule, without reading the body.
    exchange_.reset();
    run_ = nullptr;
    return Refuse(413,
                  "the request body is larger than the server allows (" +
                      std::to_string(d.body_limit) + " bytes)",
                  true);
  }
  if (!head_.has_body) return Dispatch();
  parser_->body_limit(d.body_limit);
  if (head_.version == 11 && beast::iequals(head_.Header("Expect"), "100-continue")) {
    // The client waits for this before it sends a large body.
    auto self = shared_from_this();
    auto cont = std::make_shared<std::string>("HTTP/1.1 100 Continue\r\n\r\n");
    stream_.expires_after(t_->options.write_timeout);
    state_ = State::kBody;
    net::async_write(stream_, net::buffer(*cont), [self, cont](beast::error_code e, size_t) {
      if (self->state_ == State::kClosed) return;
      if (e) return self->Close();
      self->ReadBody();
    });
    return;
  }
  ReadBody();
}

void Session::ReadBody() {
  state_ = State::kBody;
  parser_->eager(true);
  stream_.expires_after(t_->options.read_timeout);
  auto self = shared_from_this();
  http::async_read_some(stream_, buffer_, *parser_, [self](beast::error_code ec, size_t) {
    if (self->state_ == State::kClosed) return;
    self->OnBody(ec);
  });
}

void Session::OnBody(beast::error_code ec) {
  if (ec) {
    exchange_.reset();
    run_ = nullptr;
    if (ec == http::error::body_limit) {
      return Refuse(413, "the request body is larger than the server allows", true);
    }
    if (ec == beast::error::timeout)
      return Refuse(408, "the request body did not arrive in time", true);
    if (ec == http::error::end_of_stream || ec == net::error::eof ||
        ec == http::error::partial_message || ec == net::error::connection_reset) {
      t_->handler->OnRefused(head_, 0, "the client closed the connection before sending the body");
      return Close();
    }
    return Refuse(400, "malformed request body framing: " + ec.message(), true);
  }
  if (!parser_->is_done()) return ReadBody();  // progress: the read deadline starts again
  body_read_ = true;
  Dispatch();
}

void Session::Dispatch() {
  state_ = State::kHandling;
  auto* ex = static_cast<Exchange*>(exchange_.get());
  *ex->mutable_body() = parser_->release().body();
  auto run = std::move(run_);
  run_ = nullptr;
  // The I/O loop keeps running while a handler works (its answer is posted back to it).
  t_->workers.Post(
      [run = std::move(run), ex = exchange_, guard = net::make_work_guard(t_->ioc)]() mutable {
        run(ex);
        ex.reset();
        guard.reset();
      });
}

bool Session::Queue(std::string_view bytes, bool end, bool close) {
  std::lock_guard<std::mutex> lock(out_mu_);
  if (gone_) return false;
  pending_ += bytes;
  end_ = end_ || end;
  close_ = close_ || close;
  if (!writing_) {
    writing_ = true;
    net::post(t_->ioc, [self = shared_from_this()] { self->WriteMore(); });
  }
  return true;
}

bool Session::WaitForRoom() {
  std::unique_lock<std::mutex> lock(out_mu_);
  out_cv_.wait(lock,
               [this] { return gone_ || pending_.size() + in_flight_ <= t_->options.max_pending; });
  return !gone_;
}

bool Session::PeerGone() {
  std::lock_guard<std::mutex> lock(out_mu_);  // the descriptor is closed only under this lock
  if (gone_) return true;
  pollfd p{};
  p.fd = stream_.socket().native_handle();
  p.events = POLLIN | POLLRDHUP;
  if (p.fd < 0 || poll(&p, 1, 0) <= 0) return false;
  if ((p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) return true;
  if ((p.revents & POLLIN) != 0) {  // readable: a pipelined request, or the end of the stream
    char c = 0;
    const ssize_t n = recv(p.fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

void Session::WriteMore() {
  if (state_ == State::kClosed) return;
  bool finished = false;
  size_t writing = 0;
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    in_flight_ = 0;
    out_cv_.notify_all();
    if (pending_.empty()) {
      writing_ = false;
      finished = end_;
    } else {
      out_buf_.swap(pending_);
      pending_.clear();
      in_flight_ = writing = out_buf_.size();
    }
  }
  if (finished) return FinishResponse(true);
  if (writing == 0) return;
  out_done_ = 0;
  WriteSome();
}

void Session::WriteSome() {
  // Each piece the kernel takes restarts the deadline: write_timeout bounds a client that reads
  // nothing, not a slow one.
  stream_.expires_after(t_->options.write_timeout);
  auto self = shared_from_this();
  stream_.async_write_some(net::buffer(out_buf_.data() + out_done_, out_buf_.size() - out_done_),
                           [self](beast::error_code ec, size_t n) {
                             if (self->state_ == State::kClosed) return;
                             if (ec) {  // reset, closed, or not read for write_timeout
                               self->Done(false);
                               return self->Close();
                             }
                             self->out_done_ += n;
                             if (self->out_done_ < self->out_buf_.size()) return self->WriteSome();
                             self->WriteMore();
                           });
}

void Session::Done(bool complete) {
  std::function<void(int, bool)> done;
  int status = 0;
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    done.swap(done_);
    status = status_;
  }
  if (done) done(status, complete);
}

void Session::FinishResponse(bool complete) {
  bool close = false;
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    close = close_;
    end_ = close_ = false;
  }
  Done(complete);
  served_ = true;
  exchange_.reset();
  const bool keep = !close && keep_alive_ && body_read_;
  if (!body_read_) return Linger();
  if (!keep) {
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    return Close();
  }
  WaitForRequest();
}

void Session::Refuse(int status, std::string_view why, bool log) {
  state_ = State::kHandling;
  if (log) t_->handler->OnRefused(head_, status, why);
  body_read_ = false;  // whatever the client still sends is dropped, not parsed
  linger_limit_ = status == 413 ? t_->options.linger_bytes : kLingerAfterBadBytes;
  Queue(ResponseHead(status, "application/json", {}, ErrorJson(status, why).size(), false, true) +
            ErrorJson(status, why),
        true, true);
}

void Session::Linger() {
  // Half-close, then read and drop what the client still sends (bounded), so that a client
  // still sending a refused body reads the answer rather than a reset.
  state_ = State::kLinger;
  if (t_->draining || t_->stopped) return Close();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  buffer_.clear();
  linger_left_ = linger_limit_ != 0 ? linger_limit_ : t_->options.linger_bytes;
  linger_until_ = Clock::now() + t_->options.linger_time;
  LingerRead();
}

void Session::LingerRead() {
  stream_.expires_at(linger_until_);
  auto self = shared_from_this();
  stream_.async_read_some(net::buffer(scratch_), [self](beast::error_code ec, size_t n) {
    if (self->state_ == State::kClosed) return;
    if (ec || n >= self->linger_left_) return self->Close();
    self->linger_left_ -= n;
    self->LingerRead();
  });
}

void Session::Close() {
  if (state_ == State::kClosed) return;
  state_ = State::kClosed;
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    gone_ = true;
    out_cv_.notify_all();
    beast::error_code ec;
    stream_.socket().close(ec);  // under the lock: PeerGone() never polls a reused descriptor
  }
  Done(false);
  exchange_.reset();
  run_ = nullptr;
  t_->sessions.erase(this);
}

void HttpTransport::Impl::Accept() {
  acceptor.async_accept([this](beast::error_code ec, tcp::socket socket) {
    if (stopped) return;
    if (ec) {
      if (ec == net::error::operation_aborted) return;
      // Out of descriptors (EMFILE) or similar: wait a little rather than spin.
      std::fprintf(stderr, "[serve] accept: %s\n", ec.message().c_str());
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](beast::error_code e) {
        if (!e && !stopped) Accept();
      });
      return;
    }
    auto s = std::make_shared<Session>(this, std::move(socket));
    s->Start(sessions.size() >= options.max_connections);
    Accept();
  });
}

HttpTransport::HttpTransport(TransportOptions options, TransportHandler* handler)
    : impl_(std::make_shared<Impl>(std::move(options), handler)) {}

HttpTransport::~HttpTransport() { impl_->workers.Shutdown(); }

StatusOr<int> HttpTransport::Bind() {
  Impl& m = *impl_;
  // Every connection is a descriptor: the soft limit (often 1024) is raised to the hard one.
  rlimit nofile{};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }
  beast::error_code ec;
  const net::ip::address addr = net::ip::make_address(m.options.host, ec);
  if (ec) return InvalidArgument("--host " + m.options.host + " is not an IP address");
  const tcp::endpoint ep(addr, static_cast<unsigned short>(m.options.port));
  auto fail = [&](const char* what) {
    return IoError("cannot listen on " + m.options.host + ":" + std::to_string(m.options.port) +
                   " (" + what + ": " + ec.message() + ")");
  };
  m.acceptor.open(ep.protocol(), ec);
  if (ec) return fail("socket");
  m.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  m.acceptor.bind(ep, ec);
  if (ec) return fail("bind");
  m.acceptor.listen(m.options.backlog, ec);
  if (ec) return fail("listen");
  return static_cast<int>(m.acceptor.local_endpoint().port());
}

Status HttpTransport::Run() {
  Impl& m = *impl_;
  net::post(m.ioc, [&m] {
    if (!m.stopped) m.Accept();
  });
  try {
    m.ioc.run();
  } catch (const std::exception& e) {
    return Internal(std::string("HTTP transport: ") + e.what());
  }
  return Status::Ok();
}

void HttpTransport::BeginDrain() {
  auto m = impl_;
  net::post(m->ioc, [m] {
    m->draining = true;
    std::vector<Session*> all(m->sessions.begin(), m->sessions.end());
    for (Session* s : all) s->OnDrain();
  });
}

void HttpTransport::CloseListener() {
  auto m = impl_;
  net::post(m->ioc, [m] {
    beast::error_code ec;
    m->acceptor.close(ec);
  });
}

void HttpTransport::Stop() {
  auto m = impl_;
  net::post(m->ioc, [m] {
    m->stopped = true;
    beast::error_code ec;
    m->acceptor.close(ec);
    m->accept_retry.cancel();
    std::vector<Session*> all(m->sessions.begin(), m->sessions.end());
    for (Session* s : all) s->Close();
  });
}

size_t HttpTransport::connections() const { return impl_->open.load(); }

}  // namespace vls::server
