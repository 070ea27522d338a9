// See router.hpp.
#include "server/router.hpp"

namespace gpuex::http {

std::vector<std::string_view> split_path(std::string_view path) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '/') {
      ++i;
      continue;
    }
    auto end = path.find('/', i);
    if (end == std::string_view::npos) end = path.size();
    out.push_back(path.substr(i, end - i));
    i = end;
  }
  return out;
}

void Router::add(bhttp::verb method, std::string pattern, Handler handler) {
  std::vector<std::string> segments;
  for (auto s : split_path(pattern)) segments.emplace_back(s);
  routes_.push_back({method, std::move(pattern), std::move(segments), std::move(handler)});
}

Router::Match Router::match(bhttp::verb method, std::string_view path) const {
  auto parts = split_path(path);
  Match result;
  for (const auto& route : routes_) {
    if (route.segments.size() != parts.size()) continue;
    std::map<std::string, std::string, std::less<>> params;
    bool ok = true;
    for (std::size_t i = 0; i < parts.size() && ok; ++i) {
      const auto& seg = route.segments[i];
      if (seg.size() > 2 && seg.front() == '{' && seg.back() == '}') {
        params.emplace(seg.substr(1, seg.size() - 2), parts[i]);
      } else {
        ok = seg == parts[i];
      }
    }
    if (!ok) continue;
    // HEAD is GET without the body (RFC 9110 §9.3.2): every GET route answers it.
    if (route.method == method || (method == bhttp::verb::head && route.method == bhttp::verb::get)) {
      result.handler = &route.handler;
      result.pattern = route.pattern;
      result.params = std::move(params);
      result.allow.clear();
      return result;
    }
    if (result.pattern.empty()) result.pattern = route.pattern;
    if (!result.allow.empty()) result.allow += ", ";
    result.allow += std::string(bhttp::to_string(route.method));
    if (route.method == bhttp::verb::get) result.allow += ", HEAD";
  }
  return result;
}

}  // namespace gpuex::http
