// Maps a method and path to a handler; path templates capture segments ("/v1/markets/{m}/book").
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/http_response.hpp"
#include "server/principal.hpp"

namespace gpuex::http {

// Sends the response; may be called from any thread, exactly once.
using Respond = std::function<void(Response)>;

// One request as handlers see it. It lives until the response is sent, so a handler that answers
// later (after a database read) may keep a reference.
struct RequestContext {
  const Request& request;
  std::map<std::string, std::string, std::less<>> path_params;
  std::string remote_address;
  std::optional<Principal> principal;  // set by the gate on authenticated routes
};

using Handler = std::function<void(RequestContext& ctx, Respond respond)>;

class Router {
 public:
  // `pattern` segments in braces capture; others match exactly.
  void add(bhttp::verb method, std::string pattern, Handler handler);

  struct Match {
    const Handler* handler = nullptr;     // null: no route for this method
    std::string pattern;                  // the route's template, the label in metrics
    std::map<std::string, std::string, std::less<>> params;
    std::string allow;                    // methods the path has, when the method did not match
  };
  // An unknown path gives an empty pattern; a known path with another method gives `allow`.
  Match match(bhttp::verb method, std::string_view path) const;

 private:
  struct Route {
    bhttp::verb method;
    std::string pattern;
    std::vector<std::string> segments;
    Handler handler;
  };
  std::vector<Route> routes_;
};

std::vector<std::string_view> split_path(std::string_view path);
// A path segment percent-decoded ("a%3Ab" is "a:b"); nothing for a broken escape, a control character
// or bytes that are not UTF-8.
std::optional<std::string> decode_segment(std::string_view raw);

}  // namespace gpuex::http
