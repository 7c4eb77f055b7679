// Whether the client of an HTTP request is still there, while the request is being computed.
//
// cpp-httplib 0.11 (Debian 12) tells a handler nothing about its connection, so the probe finds
// the connection's socket among the process's descriptors by its two addresses (the server's
// local address and port, the client's address and port: unique among open connections) and
// then asks the kernel: a peer that closed or half-closed the connection (EOF, RDHUP, HUP or an
// error) is gone. Bytes the client sent ahead (a pipelined request) do not count as gone.
//
// The descriptor is found once per request; it stays the connection's while the handler runs
// (the HTTP library closes it only after the response).
#ifndef VLSTACK_SERVER_CONNECTION_PROBE_H_
#define VLSTACK_SERVER_CONNECTION_PROBE_H_

#include <cstddef>
#include <string>

namespace vls::server {

class ConnectionProbe {
 public:
  // Finds the socket connected from remote_addr:remote_port to local_addr:local_port (IPv4 or
  // IPv6 text addresses). A probe that finds none reports the client as present.
  ConnectionProbe(const std::string& local_addr, int local_port, const std::string& remote_addr,
                  int remote_port);

  bool found() const { return fd_ >= 0; }
  // True when the client has closed its side of the connection (or the socket failed).
  bool PeerGone() const;
  // Reads and drops what the client sends, up to `max_bytes`, until it has been silent for
  // `idle_ms` (a lingering close: a client still sending a body the server refuses then reads
  // the answer instead of a connection reset). Returns the bytes dropped.
  size_t Discard(size_t max_bytes, int idle_ms) const;

 private:
  int fd_ = -1;
};

}  // namespace vls::server

#endif  // VLSTACK_SERVER_CONNECTION_PROBE_H_
