// Routing: templates capture path segments; unknown paths and wrong methods are told apart.
#include <catch2/catch.hpp>

#include "server/router.hpp"

using namespace gpuex::http;

TEST_CASE("the router captures segments and tells 404 from 405") {
  Router router;
  int called = 0;
  router.add(bhttp::verb::get, "/v1/markets", [&](RequestContext&, Respond) { called = 1; });
  router.add(bhttp::verb::get, "/v1/markets/{m}/book", [&](RequestContext&, Respond) { called = 2; });
  router.add(bhttp::verb::post, "/v1/markets/{m}/halt", [&](RequestContext&, Respond) { called = 3; });

  auto book = router.match(bhttp::verb::get, "/v1/markets/H100-SXM-80G/book");
  REQUIRE(book.handler != nullptr);
  CHECK(book.pattern == "/v1/markets/{m}/book");
  CHECK(book.params.at("m") == "H100-SXM-80G");

  auto list = router.match(bhttp::verb::get, "/v1/markets/");
  REQUIRE(list.handler != nullptr);
  CHECK(list.pattern == "/v1/markets");

  auto wrong_method = router.match(bhttp::verb::delete_, "/v1/markets/X/halt");
  CHECK(wrong_method.handler == nullptr);
  CHECK(wrong_method.allow == "POST");

  auto head = router.match(bhttp::verb::head, "/v1/markets/H100-SXM-80G/book");
  REQUIRE(head.handler != nullptr);
  CHECK(head.pattern == "/v1/markets/{m}/book");
  auto wrong_for_get = router.match(bhttp::verb::put, "/v1/markets");
  CHECK(wrong_for_get.allow == "GET, HEAD");
  CHECK(router.match(bhttp::verb::head, "/v1/markets/X/halt").handler == nullptr);

  auto unknown = router.match(bhttp::verb::get, "/v1/nothing");
  CHECK(unknown.handler == nullptr);
  CHECK(unknown.pattern.empty());
  CHECK(unknown.allow.empty());
  CHECK(called == 0);
}
