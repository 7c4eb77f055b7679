// The HTTP transport (http_transport.h) with a small handler, over real sockets: keep-alive,
// bodies, answers from the header, backpressure on a client that does not read, a client that
// leaves mid-stream, and Stop() with connections open. Runs under ThreadSanitizer in CI (the
// output queue is shared between the I/O thread and the workers).
#include "server/http_transport.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

namespace vls::server {
namespace {

using namespace std::chrono_literals;

class TestHandler : public TransportHandler {
 public:
  HeadDecision OnHead(const std::shared_ptr<HttpExchange>& ex) override {
    const std::string& path = ex->head().path;
    HeadDecision d;
    d.body_limit = 1 << 20;
    if (path == "/get") {
      ex->Reply(200, "text/plain", "hello");
      return {};
    }
    if (path == "/echo") {
      d.run = [](const std::shared_ptr<HttpExchange>& x) {
        x->Reply(200, "text/plain", x->body());
      };
      return d;
    }
    if (path == "/stream") {
      d.run = [this](const std::shared_ptr<HttpExchange>& x) {
        x->BeginStream(200, "text/plain", {});
        const std::string piece(64 << 10, 'x');
        for (int i = 0; i < kPieces; ++i) {
          if (!x->Write(piece)) {
            stopped_early.store(true);
            break;
          }
          written.fetch_add(piece.size());
        }
        x->EndStream();
        finished.store(true);
      };
      return d;
    }
    ex->Reply(404, "text/plain", "no");
    return {};
  }
  void OnRefused(const RequestHead&, int, std::string_view) override { refused.fetch_add(1); }

  static constexpr int kPieces = 256;  // 16 MiB
  std::atomic<size_t> written{0};
  std::atomic<bool> stopped_early{false}, finished{false};
  std::atomic<int> refused{0};
};

class Transport : public ::testing::Test {
 protected:
  void SetUp() override {
    TransportOptions o;
    o.port = 0;
    o.write_timeout = 2000ms;
    t_ = std::make_unique<HttpTransport>(o, &handler_);
    auto port = t_->Bind();
    ASSERT_TRUE(port.ok()) << port.status().ToString();
    port_ = *port;
    runner_ = std::thread([this] { ASSERT_TRUE(t_->Run().ok()); });
  }
  void TearDown() override {
    t_->Stop();
    runner_.join();
  }

  int Connect(int rcvbuf = 0) const {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port_));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
  }
  static void Send(int fd, const std::string& s) {
    ASSERT_EQ(send(fd, s.data(), s.size(), MSG_NOSIGNAL), static_cast<ssize_t>(s.size()));
  }
  // Reads until `until` appears (or EOF / timeout); returns what was read. Each read is searched
  // with the few bytes before it only: a 16 MiB stream read through a 4 KiB window is thousands
  // of reads, and searching all of `got` each time kept the reader away from the socket for
  // longer than the writer's timeout under ThreadSanitizer on a loaded machine.
  static std::string ReadUntil(int fd, const std::string& until) {
    std::string got;
    char buf[65536];
    size_t from = 0;
    while (got.find(until, from) == std::string::npos) {
      from = got.size() >= until.size() ? got.size() - until.size() + 1 : 0;
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    return got;
  }
  static std::string ReadAll(int fd) { return ReadUntil(fd, std::string(1, '\0') + "never"); }

  TestHandler handler_;
  std::unique_ptr<HttpTransport> t_;
  std::thread runner_;
  int port_ = 0;
};

TEST_F(Transport, KeepAliveAndBodies) {
  const int fd = Connect();
  Send(fd, "GET /get HTTP/1.1\r\nHost: a\r\n\r\n");
  std::string r = ReadUntil(fd, "hello");
  EXPECT_EQ(r.rfind("HTTP/1.1 200 OK\r\n", 0), 0u) << r;
  EXPECT_NE(r.find("Content-Length: 5\r\n"), std::string::npos) << r;
  Send(fd, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 6\r\n\r\nabcdef");
  r = ReadUntil(fd, "abcdef");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
  Send(fd,
       "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nxyz\r\n0\r\n\r\n");
  r = ReadUntil(fd, "xyz");
  EXPECT_EQ(r.rfind("HTTP/1.1 200", 0), 0u) << r;
  // Two pipelined requests are both answered, in order.
  Send(fd, "GET /get HTTP/1.1\r\nHost: a\r\n\r\nGET /nope HTTP/1.1\r\nHost: a\r\n\r\n");
  r = ReadUntil(fd, "\r\n\r\nno");
  EXPECT_NE(r.find("200 OK"), std::string::npos) << r;
  EXPECT_NE(r.find("404"), std::string::npos) << r;
  EXPECT_LT(r.find("200 OK"), r.find("404"));
  close(fd);
}

TEST_F(Transport, RefusalClosesTheConnection) {
  const int fd = Connect();
  Send(fd, "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd");
  const std::string r = ReadAll(fd);
  EXPECT_EQ(r.rfind("HTTP/1.1 400", 0), 0u) << r;
  EXPECT_NE(r.find("Connection: close"), std::string::npos) << r;
  close(fd);
  EXPECT_EQ(handler_.refused.load(), 1);
}

TEST_F(Transport, BackpressureHoldsAWriterWhoseClientDoesNotRead) {
  // A small receive window (set before connecting, so the window is not scaled), then a pause.
  const int fd = Connect(4096);
  Send(fd, "GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
  std::this_thread::sleep_for(500ms);
  // Bounded by max_pending (256 KiB) and what the kernel's buffers hold, far from 16 MiB.
  const size_t early = handler_.written.load();
  EXPECT_LT(early, size_t{4} << 20);
  EXPECT_FALSE(handler_.finished.load());
  // Reading everything lets the writer finish: 16 MiB of data in 64 KiB chunks, then the end.
  const std::string r = ReadUntil(fd, "\r\n0\r\n\r\n");
  EXPECT_GT(r.size(), size_t{16} << 20);
  EXPECT_FALSE(handler_.stopped_early.load());
  close(fd);
  for (int i = 0; i < 100 && !handler_.finished.load(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(handler_.finished.load());
}

TEST_F(Transport, AClientThatLeavesStopsTheWriter) {
  const int fd = Connect();
  Send(fd, "GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
  std::this_thread::sleep_for(200ms);
  close(fd);
  for (int i = 0; i < 100 && !handler_.finished.load(); ++i) std::this_thread::sleep_for(50ms);
  EXPECT_TRUE(handler_.finished.load());
  EXPECT_TRUE(handler_.stopped_early.load());
}

TEST_F(Transport, StopEndsIdleAndStreamingConnections) {
  const int idle = Connect();
  const int streaming = Connect();
  Send(streaming, "GET /stream HTTP/1.1\r\nHost: a\r\n\r\n");
  std::this_thread::sleep_for(200ms);
  EXPECT_GE(t_->connections(), 1u);
  t_->Stop();
  runner_.join();
  runner_ = std::thread([] {});
  EXPECT_TRUE(handler_.finished.load());
  close(idle);
  close(streaming);
}

}  // namespace
}  // namespace vls::server
