// A small HTTP/1.1 client for tests, over a real loopback socket, every call bounded in time.
#pragma once

#include <boost/json/value.hpp>

#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace gpuex::test {

struct HttpReply {
  unsigned status = 0;
  std::string body;
  std::map<std::string, std::string> headers;  // lower-case names
  boost::json::value json() const;             // throws if the body is not JSON
};

// One keep-alive connection to 127.0.0.1:port; reconnects if the server closed it.
class HttpClient {
 public:
  explicit HttpClient(unsigned short port, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  ~HttpClient();
  HttpClient(const HttpClient&) = delete;
  HttpClient& operator=(const HttpClient&) = delete;

  HttpReply request(const std::string& method, const std::string& target, const std::string& body = {},
                    const std::vector<std::pair<std::string, std::string>>& headers = {});
  HttpReply get(const std::string& target) { return request("GET", target); }

 private:
  struct Impl;
  Impl* impl_;
};

// Polls `GET target` until it answers `status` or `timeout` passes; returns whether it did.
bool wait_for_status(unsigned short port, const std::string& target, unsigned status,
                     std::chrono::milliseconds timeout);

}  // namespace gpuex::test
