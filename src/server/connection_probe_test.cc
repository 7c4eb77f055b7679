#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

namespace vls::server {
namespace {

// A loopback connection: the server's accepted socket and the client's.
struct Connection {
  int listener = -1, server = -1, client = -1;
  int server_port = 0, client_port = 0;
  ~Connection() {
    for (int fd : {listener, server, client}) {
      if (fd >= 0) close(fd);
    }
  }
};

int PortOf(int fd, bool peer) {
  sockaddr_in a{};
  socklen_t len = sizeof(a);
  const int rc = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                      : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return rc == 0 ? ntohs(a.sin_port) : -1;
}

void Connect(Connection* c) {
  c->listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(c->listener, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(c->listener, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(c->listener, 4), 0);
  c->server_port = PortOf(c->listener, false);
  a.sin_port = htons(static_cast<uint16_t>(c->server_port));
  c->client = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_EQ(connect(c->client, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  c->server = accept(c->listener, nullptr, nullptr);
  ASSERT_GE(c->server, 0);
  c->client_port = PortOf(c->client, false);
}

TEST(ConnectionProbe, FindsTheSocketAndSeesTheClientLeave) {
  Connection c;
  Connect(&c);
  ConnectionProbe probe("127.0.0.1", c.server_port, "127.0.0.1", c.client_port);
  ASSERT_TRUE(probe.found());
  EXPECT_FALSE(probe.PeerGone());
  // Bytes sent ahead (a pipelined request) are not a departure.
  ASSERT_EQ(send(c.client, "GET", 3, 0), 3);
  usleep(20000);
  EXPECT_FALSE(probe.PeerGone());
  close(c.client);
  c.client = -1;
  usleep(20000);
  EXPECT_TRUE(probe.PeerGone());
}

TEST(ConnectionProbe, AHalfCloseCountsAsGone) {
  Connection c;
  Connect(&c);
  ConnectionProbe probe("127.0.0.1", c.server_port, "127.0.0.1", c.client_port);
  ASSERT_TRUE(probe.found());
  ASSERT_EQ(shutdown(c.client, SHUT_WR), 0);
  usleep(20000);
  EXPECT_TRUE(probe.PeerGone());
}

TEST(ConnectionProbe, AnUnknownConnectionIsNeverReportedGone) {
  Connection c;
  Connect(&c);
  ConnectionProbe probe("127.0.0.1", c.server_port, "127.0.0.1", c.client_port + 1);
  EXPECT_FALSE(probe.found());
  EXPECT_FALSE(probe.PeerGone());
  ConnectionProbe other("10.1.2.3", c.server_port, "127.0.0.1", c.client_port);
  EXPECT_FALSE(other.found());
}

}  // namespace
}  // namespace vls::server
