// Connection-level limits of gpuexd over real sockets: the connection caps, slow clients, and the
// RateLimit-* headers on answers that never reach a route (API.md: "on every response").
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "support/cluster.hpp"
#include "support/http_client.hpp"
#include "support/ws_client.hpp"

using namespace gpuex::test;
using namespace std::chrono_literals;

namespace {

// A bare TCP connection to 127.0.0.1:port, for what an HTTP client library would not do.
class RawConnection {
 public:
  explicit RawConnection(unsigned short port) : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    if (fd_ < 0) throw std::runtime_error("socket() failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      ::close(fd_);
      throw std::runtime_error("connect() failed");
    }
  }
  ~RawConnection() { ::close(fd_); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  void send(const std::string& bytes) {
    if (::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(bytes.size())) {
      throw std::runtime_error("send() failed");
    }
  }

  // Everything the server sends until it closes the connection; `closed` tells whether it did
  // within `timeout`.
  struct Received {
    std::string bytes;
    bool closed = false;
  };
  Received read_until_closed(std::chrono::milliseconds timeout) {
    Received r;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (::poll(&p, 1, static_cast<int>(std::max<std::int64_t>(left.count(), 1))) <= 0) continue;
      char buf[4096];
      auto n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        r.closed = true;
        return r;
      }
      r.bytes.append(buf, static_cast<std::size_t>(n));
    }
    return r;
  }

 private:
  int fd_;
};

bool has_header(const std::string& response, const std::string& line) {
  return response.find("\r\n" + line + "\r\n") != std::string::npos;
}

}  // namespace

TEST_CASE("connections past the per-IP limit get a 429 with Retry-After and the limit headers, and a freed place is taken again") {
  TestDatabase db;
  Gpuexd server(db.dsn(), {"--max-connections-per-ip", "2", "--ip-rate", "10", "--ip-burst", "20"});
  // Two connections, open and counted (a refused one is tried again: the server may not yet have seen
  // the close of the connection the start-up's readiness check used).
  auto admitted_client = [&] {
    auto client = std::make_unique<HttpClient>(server.port(), 1s);
    for (auto deadline = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < deadline;) {
      try {
        if (client->get("/healthz").status == 200) return client;
      } catch (const std::exception&) {
      }
      std::this_thread::sleep_for(50ms);
    }
    FAIL("no connection was admitted within 5 s");
    return client;
  };
  auto first = admitted_client();
  auto second_client = admitted_client();
  HttpClient& second = *second_client;

  RawConnection third(server.port());
  auto refused = third.read_until_closed(5s);
  INFO(refused.bytes);
  CHECK(refused.closed);
  CHECK(refused.bytes.starts_with("HTTP/1.1 429 "));
  CHECK(has_header(refused.bytes, "Retry-After: 1"));
  // Two /healthz answers were not charged to the IP's bucket: it is still full.
  CHECK(has_header(refused.bytes, "RateLimit-Limit: 20"));
  CHECK(has_header(refused.bytes, "RateLimit-Remaining: 20"));
  CHECK(refused.bytes.find(R"("code":"rate_limited")") != std::string::npos);

  // The server keeps serving the connections it has, and a connection that ends frees its place.
  CHECK(second.get("/healthz").status == 200);
  first.reset();
  bool admitted = false;
  for (auto deadline = std::chrono::steady_clock::now() + 5s; !admitted && std::chrono::steady_clock::now() < deadline;) {
    HttpClient again(server.port(), 1s);
    try {
      admitted = again.get("/healthz").status == 200;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(50ms);  // still refused: the server has not seen the close yet
    }
  }
  CHECK(admitted);
}

TEST_CASE("a client that sends half a request is disconnected after the read timeout, and others are served") {
  TestDatabase db;
  Gpuexd server(db.dsn(), {"--read-timeout-s", "1"});
  RawConnection slow(server.port());
  slow.send("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n");  // the blank line never comes
  auto cut = slow.read_until_closed(10s);
  CHECK(cut.closed);
  CHECK(cut.bytes.empty());  // no answer to a request that never arrived
  HttpClient client(server.port());
  CHECK(client.get("/healthz").status == 200);
}

TEST_CASE("WebSocket upgrades, accepted or refused, carry the caller's RateLimit headers") {
  TestDatabase db;
  Gpuexd server(db.dsn(), {"--ip-rate", "1", "--ip-burst", "7"});
  auto accepted = upgrade(server.port());
  CHECK(accepted.status == 101);
  CHECK(accepted.headers["ratelimit-limit"] == "7");
  CHECK(accepted.headers["ratelimit-remaining"] == "6");  // the upgrade took one token
  auto refused = upgrade(server.port(), {{"Authorization", "Bearer gpx_k_0000000000000000_" + std::string(64, '0')}});
  CHECK(refused.status == 401);
  CHECK(refused.headers["ratelimit-limit"] == "7");
  CHECK(refused.headers.count("ratelimit-remaining") == 1);
  // The metrics count each upgrade by the status it got.
  auto metrics = HttpClient(server.port()).get("/metrics").body;
  CHECK(metrics.find(R"(gpuex_http_requests_total{route="/v1/ws",method="GET",status="101"} 1)") != std::string::npos);
  CHECK(metrics.find(R"(gpuex_http_requests_total{route="/v1/ws",method="GET",status="401"} 1)") != std::string::npos);
}
