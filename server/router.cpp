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

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
bool valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the allowed range of the second byte
    if (c < 0x80) n = 0;
    else if (c >= 0xC2 && c <= 0xDF) n = 1;
    else if (c >= 0xE0 && c <= 0xEF) n = 2, lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
    else if (c >= 0xF0 && c <= 0xF4) n = 3, lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
    else return false;
    if (s.size() - i - 1 < n) return false;
    for (std::size_t k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n + 1;
  }
  return true;
}

}  // namespace

std::optional<std::string> decode_segment(std::string_view raw) {
  std::string out;
  out.reserve(raw.size());
  for (std::size_t i = 0; i < raw.size(); ++i) {
    if (raw[i] != '%') {
      out += raw[i];
      continue;
    }
    if (i + 2 >= raw.size()) return std::nullopt;
    const int h = hex_digit(raw[i + 1]), l = hex_digit(raw[i + 2]);
    if (h < 0 || l < 0) return std::nullopt;
    out += static_cast<char>(h * 16 + l);
    i += 2;
  }
  // Captures go to the engine and to PostgreSQL as text: controls (NUL among them) and broken UTF-8
  // name nothing that can exist.
  for (char c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) return std::nullopt;
  }
  if (!valid_utf8(out)) return std::nullopt;
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
        // A capture that does not decode matches nothing: the path names no such thing (404).
        auto value = decode_segment(parts[i]);
        ok = value.has_value();
        if (ok) params.emplace(seg.substr(1, seg.size() - 2), std::move(*value));
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
