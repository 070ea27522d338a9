// The web dashboard: the files of --web-root (the source's web/) at /, and the one npm file it
// needs (the charting library, from --web-vendor = node_modules, installed by scripts/setup).
// Files are read once at start, so a request can never name a path outside that list.
#include <spdlog/spdlog.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>

#include "server/routes.hpp"
#include "server/sha256.hpp"

namespace gpuex {
namespace {

namespace fs = std::filesystem;
using boost::beast::http::field;
using boost::beast::http::verb;

constexpr std::uintmax_t kMaxFileBytes = 8u << 20;

// npm files the page loads, by the path it asks for.
struct VendorFile {
  std::string_view url;
  std::string_view path;  // under node_modules
};
constexpr VendorFile kVendorFiles[] = {
    {"/vendor/lightweight-charts.js", "lightweight-charts/dist/lightweight-charts.standalone.production.js"},
};

// Everything the page loads comes from gpuexd itself (no CDN); the WebSocket too.
constexpr std::string_view kContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

std::string_view content_type(const fs::path& file) {
  auto ext = file.extension().string();
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js" || ext == ".mjs") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".ico") return "image/x-icon";
  if (ext == ".json") return "application/json";
  return {};
}

struct StaticFile {
  std::string body;
  std::string_view type;
  std::string etag;
};

std::shared_ptr<const StaticFile> load(const fs::path& file) {
  auto type = content_type(file);
  std::error_code ec;
  if (type.empty() || !fs::is_regular_file(file, ec) || fs::file_size(file, ec) > kMaxFileBytes) return nullptr;
  std::ifstream in(file, std::ios::binary);
  std::ostringstream body;
  body << in.rdbuf();
  if (!in) return nullptr;
  auto f = std::make_shared<StaticFile>();
  f->body = std::move(body).str();
  f->type = type;
  f->etag = "\"" + sha256_hex(f->body).substr(0, 32) + "\"";
  return f;
}

void serve(http::Router& router, Services& services, const std::string& url, std::shared_ptr<const StaticFile> file) {
  router.add(verb::get, url, services.gate.open([file](http::RequestContext& ctx, http::Respond respond) {
    if (ctx.request[field::if_none_match] == file->etag) {
      http::Response res{http::Status::not_modified, 11};
      res.set(field::etag, file->etag);
      res.prepare_payload();
      return respond(std::move(res));
    }
    auto res = http::text_response(http::Status::ok, file->body, file->type);
    res.set(field::cache_control, "no-cache");  // revalidate: a new gpuexd may serve new files
    res.set(field::etag, file->etag);
    res.set("X-Content-Type-Options", "nosniff");
    res.set("Content-Security-Policy", kContentSecurityPolicy);
    respond(std::move(res));
  }));
}

}  // namespace

void add_web_routes(http::Router& router, Services& services, const std::string& web_root,
                    const std::string& web_vendor) {
  if (web_root.empty()) {
    spdlog::info("web: no --web-root, the dashboard is off");
    return;
  }
  std::error_code ec;
  if (!fs::is_directory(web_root, ec)) throw std::runtime_error("--web-root " + web_root + " is not a folder");
  int files = 0;
  for (const auto& entry : fs::directory_iterator(web_root)) {
    auto file = load(entry.path());
    if (!file) continue;
    auto name = entry.path().filename().string();
    if (name == "index.html") serve(router, services, "/", file);
    serve(router, services, "/" + name, std::move(file));
    ++files;
  }
  for (const auto& vendor : kVendorFiles) {
    auto path = fs::path(web_vendor) / vendor.path;
    auto file = web_vendor.empty() ? nullptr : load(path);
    if (!file) {
      spdlog::warn("web: {} not found (--web-vendor {}): the dashboard's charts stay empty; scripts/setup installs it",
                   path.string(), web_vendor.empty() ? "unset" : web_vendor);
      continue;
    }
    serve(router, services, std::string(vendor.url), std::move(file));
    ++files;
  }
  spdlog::info("web: dashboard at / ({} files from {})", files, web_root);
}

}  // namespace gpuex
