// The dashboard's files over real HTTP: only the files of --web-root (and the one npm file of
// --web-vendor) are served, with their type, a self-only Content-Security-Policy and revalidation.
// The page itself is tested in a real browser (tests/browser).
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "support/cluster.hpp"
#include "support/http_client.hpp"
#include "support/process.hpp"

using namespace gpuex::test;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

const std::string kIndex = "<!doctype html><title>gpuex test page</title>";
const std::string kApp = "export const answer = 42;";
const std::string kCharts = "window.LightweightCharts = {};";

struct WebSite {
  fs::path root = scratch_path("web-root");
  fs::path vendor = scratch_path("web-vendor");
  WebSite() {
    fs::remove_all(root);
    fs::remove_all(vendor);
    write(root / "index.html", kIndex);
    write(root / "app.js", kApp);
    write(root / "notes.txt", "not a web file");
    write(root / "sub" / "inner.js", "nested");
    write(vendor / "lightweight-charts/dist/lightweight-charts.standalone.production.js", kCharts);
    write(vendor / "other/index.js", "another package");
  }
};

}  // namespace

TEST_CASE("the dashboard's files are served from --web-root, nothing else", "[web]") {
  TestDatabase db;
  WebSite site;
  Gpuexd server(db.dsn(), {"--web-root", site.root.string(), "--web-vendor", site.vendor.string()});
  HttpClient http(server.port());

  auto index = http.get("/");
  REQUIRE(index.status == 200);
  CHECK(index.body == kIndex);
  CHECK(index.headers["content-type"] == "text/html; charset=utf-8");
  CHECK(index.headers["content-security-policy"].find("default-src 'self'") != std::string::npos);
  CHECK(index.headers["x-content-type-options"] == "nosniff");
  CHECK(http.get("/index.html").body == kIndex);

  auto app = http.get("/app.js");
  CHECK(app.status == 200);
  CHECK(app.body == kApp);
  CHECK(app.headers["content-type"] == "text/javascript; charset=utf-8");

  auto charts = http.get("/vendor/lightweight-charts.js");
  CHECK(charts.status == 200);
  CHECK(charts.body == kCharts);

  SECTION("an unchanged file is revalidated with its ETag") {
    const std::string etag = app.headers["etag"];
    REQUIRE(etag.size() > 2);
    auto again = http.request("GET", "/app.js", {}, {{"If-None-Match", etag}});
    CHECK(again.status == 304);
    CHECK(again.body.empty());
    CHECK(http.request("GET", "/app.js", {}, {{"If-None-Match", "\"other\""}}).status == 200);
    auto head = http.request("HEAD", "/app.js");
    CHECK(head.status == 200);
    CHECK(head.body.empty());
    CHECK(head.headers["content-length"] == std::to_string(kApp.size()));
    CHECK(head.headers["etag"] == etag);
  }

  SECTION("files of other types, in sub-folders, outside the root or of other packages are not served") {
    for (const char* path : {"/notes.txt", "/sub/inner.js", "/../web-vendor/other/index.js", "/%2e%2e/notes.txt",
                             "/vendor/other/index.js", "/vendor/lightweight-charts/dist/lightweight-charts.standalone.production.js",
                             "/index.htm"}) {
      INFO(path);
      auto r = http.get(path);
      CHECK(r.status == 404);
      CHECK(r.json().at("error").at("code").as_string() == "not_found");
    }
    CHECK(http.request("POST", "/", "{}").status == 405);
  }

  SECTION("the API is unchanged beside it") {
    CHECK(http.get("/v1/markets").status == 200);
    CHECK(http.get("/healthz").status == 200);
  }
}

TEST_CASE("without --web-root there is no dashboard, and a missing folder stops the start", "[web]") {
  TestDatabase db;
  {
    Gpuexd server(db.dsn());
    HttpClient http(server.port());
    auto r = http.get("/");
    CHECK(r.status == 404);
    CHECK(r.json().at("error").at("code").as_string() == "not_found");
  }
  auto missing = run_gpuexd({"serve", "--dsn", db.dsn(), "--listen", "127.0.0.1:0", "--web-root",
                             scratch_path("no-such-folder")});
  CHECK(missing.exit_code != 0);
  CHECK(missing.output.find("--web-root") != std::string::npos);
}
