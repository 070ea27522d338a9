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

  // Everything the server sends until it closes the connection, or `until` is in what arrived, or `timeout`
  // passes; `closed` tells whether it closed.
  struct Received {
    std::string bytes;
    bool closed = false;
  };
  Received read_until_closed(std::chrono::milliseconds timeout, const std::string& until = {}) {
    Received r;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while ((until.empty() || r.bytes.find(until) == std::string::npos) && std::chrono::steady_clock::now() < deadline) {
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
  // What the server sends until `marker` has arrived (or it closes, or `timeout` passes).
  std::string read_until(const std::string& marker, std::chrono::milliseconds timeout) {
    return read_until_closed(timeout, marker).bytes;
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

TEST_CASE("a client that sends Expect: 100-continue gets the go-ahead before its body, then its answer") {
  TestDatabase db;
  Gpuexd server(db.dsn());
  const std::string body =
      R"({"side": "buy", "market": "H100-SXM-80G", "price": "1.0000", "quantity": 1, "duration": 3600})";
  RawConnection client(server.port());
  client.send("POST /v1/quote HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
              std::to_string(body.size()) + "\r\nExpect: 100-continue\r\n\r\n");
  // The body is held back until the server says to go on (a client gives up waiting after ~1 s and sends it
  // anyway; 5 s here, so only an answer makes this pass).
  auto go_ahead = client.read_until("\r\n\r\n", 5s);
  CHECK(go_ahead == "HTTP/1.1 100 Continue\r\n\r\n");
  client.send(body);
  auto answer = client.read_until("\"fills\"", 5s);
  INFO(answer);
  CHECK(answer.starts_with("HTTP/1.1 200 "));

  // A body over the limit by its Content-Length gets its 413 instead of the go-ahead.
  RawConnection big(server.port());
  big.send("POST /v1/quote HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000000\r\nExpect: 100-continue\r\n\r\n");
  auto refused = big.read_until_closed(5s);
  INFO(refused.bytes);
  CHECK(refused.bytes.starts_with("HTTP/1.1 413 "));
}

TEST_CASE("a request that does not say one thing once is refused: no Host, or two keys, idempotency keys or hosts") {
  TestDatabase db;
  REQUIRE(run_gpuexd({"migrate", "--dsn", db.dsn()}).exit_code == 0);
  auto one = create_account(db.dsn(), "one", "read");
  auto two = create_account(db.dsn(), "two", "read");
  Gpuexd server(db.dsn());
  const auto ask = [&](const std::string& head, const std::string& last = "}}") {  // an error's body ends so
    RawConnection c(server.port());
    c.send("GET /v1/orders HTTP/1.1\r\n" + head + "\r\n");
    return c.read_until(last, 5s);
  };
  const std::string host = "Host: 127.0.0.1\r\n";
  const std::string key1 = "Authorization: Bearer " + one.api_key + "\r\n";
  const std::string key2 = "Authorization: Bearer " + two.api_key + "\r\n";
  CHECK(ask(host + key1, "\"next_cursor\"").starts_with("HTTP/1.1 200 "));  // the same request, said once
  {  // HTTP/1.0 has no Host to require
    RawConnection old(server.port());
    old.send("GET /healthz HTTP/1.0\r\n\r\n");
    const auto served = old.read_until_closed(5s).bytes;
    INFO(served);
    CHECK(served.substr(0, 13).ends_with(" 200 "));  // served (in the server's own HTTP/1.1, RFC 9110 §2.5)
  }
  for (const std::string& head : {key1, host + key1 + key2, host + key2 + key1, host + host + key1,
                                  host + key1 + "Idempotency-Key: a\r\nIdempotency-Key: b\r\n"}) {
    auto answer = ask(head);
    INFO(head << answer);
    CHECK(answer.starts_with("HTTP/1.1 400 "));
    CHECK(answer.find(R"("code":"malformed_request")") != std::string::npos);
  }
}

TEST_CASE("a WebSocket upgrade whose key is not 16 bytes in base64 is refused with 400") {
  TestDatabase db;
  Gpuexd server(db.dsn());
  const auto upgrade_with = [&](const std::string& key) {
    RawConnection c(server.port());
    c.send("GET /v1/ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           "Sec-WebSocket-Key: " + key + "\r\nSec-WebSocket-Version: 13\r\n\r\n");
    return c.read_until("\r\n\r\n", 5s);
  };
  CHECK(upgrade_with("dGhlIHNhbXBsZSBub25jZQ==").starts_with("HTTP/1.1 101 "));  // RFC 6455's own example
  for (const char* key : {"x", "dGhlIHNhbXBsZSBub25jZQ", "dGhlIHNhbXBsZSBub25jZR==", "dGhlIHNhbXBsZSBub25j*Q==",
                                 "dGhlIHNhbXBsZSBub25jZQ==dGhl"}) {
    INFO(key);
    CHECK(upgrade_with(key).starts_with("HTTP/1.1 400 "));
  }
}
