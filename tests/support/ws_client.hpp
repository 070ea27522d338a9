// A small WebSocket client for tests: one connection to ws://127.0.0.1:port/v1/ws over a real
// loopback socket, every call bounded in time.
#pragma once

#include <boost/json/object.hpp>

#include <chrono>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpuex::test {

class WsClient {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;
  // Connects and upgrades; throws std::runtime_error when the server refuses (see upgrade_status).
  // `receive_buffer` > 0 sets SO_RCVBUF before connecting (a small one makes a slow reader).
  // `offer_deflate` offers permessage-deflate in the upgrade (see extensions()).
  explicit WsClient(unsigned short port, const Headers& headers = {}, int receive_buffer = 0,
                    bool offer_deflate = false);
  ~WsClient();
  WsClient(const WsClient&) = delete;
  WsClient& operator=(const WsClient&) = delete;

  void send(const std::string& text);
  void send(const boost::json::object& message);

  // The next message, or nullopt if none arrives within `timeout` or the connection ended.
  std::optional<boost::json::object> next(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Reads until a message of `type` (on `channel` if given) arrives; throws after `timeout`.
  boost::json::object expect(const std::string& type, const std::string& channel = {},
                             std::chrono::milliseconds timeout = std::chrono::seconds(5));

  // Set once the connection ended: the close code the server sent (0 if the socket just dropped).
  struct Ended {
    int code = 0;
    std::string reason;
    std::string error;
  };
  const std::optional<Ended>& ended() const;

  // From now on, every message sent and received is appended to `out` as a JSON line
  // {"from": "client"|"server", "message": ...} (for tests/contract/check_ws_messages.py).
  void record(std::ostream* out);

  // Sends a ping control frame; the payloads of the pongs received so far (they arrive while
  // next() reads).
  void ping(const std::string& payload);
  const std::vector<std::string>& pongs() const;

  // The Sec-WebSocket-Extensions header of the server's upgrade response ("" if none).
  const std::string& extensions() const;

  // The next bytes the server sent, straight from the socket, not parsed as frames (at most
  // `max` bytes, one read; "" if none arrive within `timeout`). Only between messages: never after
  // next() has started reading.
  std::string read_raw(std::chrono::milliseconds timeout, std::size_t max = 1 << 20);

  void close();  // a clean close handshake
  void kill();   // drops the TCP connection without a close frame

  struct Impl;

 private:
  Impl* impl_;
};

// The server's answer to an attempted upgrade to /v1/ws (status 101 when it worked).
struct UpgradeAnswer {
  unsigned status = 0;
  std::map<std::string, std::string> headers;  // lower-case names
};
UpgradeAnswer upgrade(unsigned short port, const WsClient::Headers& headers = {});

}  // namespace gpuex::test
