// Helpers shared by the routes: running a command through the engine, ids, pages, query strings.
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include <charconv>

#include "server/routes.hpp"

namespace gpuex {

http::Response not_found(std::string_view what, std::string_view field) {
  return http::error_response(http::Status::not_found, "not_found", "no such " + std::string(what), field);
}

http::Response store_unavailable_response() {
  return http::error_response(http::Status::service_unavailable, "store_unavailable",
                              "the exchange cannot store writes right now; nothing was done, retry shortly");
}

void run_command(Services& services, matching::AccountId account, matching::CommandBody body, EngineRunner::Admit admit,
                 std::function<http::Response(const matching::EventSink&, matching::Seq)> answer,
                 std::function<http::Response()> refused, http::Respond respond) {
  if (!services.runner.accepting()) return respond(store_unavailable_response());
  services.runner.submit(account, std::move(body), std::move(admit),
                         [answer = std::move(answer), refused = std::move(refused), respond](
                             EngineRunner::Outcome outcome, const matching::EventSink* events, matching::Seq seq) {
                           switch (outcome) {
                             case EngineRunner::Outcome::committed: return respond(answer(*events, seq));
                             case EngineRunner::Outcome::refused: return respond(refused());
                             case EngineRunner::Outcome::store_unavailable: return respond(store_unavailable_response());
                           }
                         });
}

std::optional<std::int64_t> path_id(const http::RequestContext& ctx, std::string_view name) {
  auto it = ctx.path_params.find(name);
  if (it == ctx.path_params.end()) return std::nullopt;
  std::int64_t v = 0;
  const auto& s = it->second;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v <= 0) return std::nullopt;
  return v;
}

std::optional<std::string> query_param(const http::RequestContext& ctx, std::string_view name) {
  auto target = ctx.request.target();
  auto parsed = boost::urls::parse_origin_form(target);
  if (!parsed) return std::nullopt;
  for (auto param : parsed->params()) {
    if (param.key == name) return std::string(param.value);
  }
  return std::nullopt;
}

std::variant<Page, http::Response> read_page(const http::RequestContext& ctx) {
  Page page;
  if (auto limit = query_param(ctx, "limit")) {
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(limit->data(), limit->data() + limit->size(), v);
    if (ec != std::errc() || ptr != limit->data() + limit->size() || v < 1 || v > 1000) {
      return http::error_response(http::Status::bad_request, "invalid_field", "limit must be 1 to 1000", "limit");
    }
    page.limit = v;
  }
  if (auto cursor = query_param(ctx, "cursor")) {
    std::int64_t v = 0;
    auto [ptr, ec] = std::from_chars(cursor->data(), cursor->data() + cursor->size(), v);
    if (ec != std::errc() || ptr != cursor->data() + cursor->size() || v < 1) {
      return http::error_response(http::Status::bad_request, "invalid_field", "cursor is not one this server gave",
                                  "cursor");
    }
    page.before = v;
  }
  return page;
}

boost::json::object page_json(const store::PgResult& rows, const Page& page, std::string_view key) {
  boost::json::array items;
  for (int i = 0; i < rows.rows() && i < page.limit; ++i) items.push_back(boost::json::parse(rows.text(i, 0)));
  boost::json::value next = nullptr;
  if (rows.rows() > page.limit) next = boost::json::string(rows.text(static_cast<int>(page.limit) - 1, 1));
  return {{key, std::move(items)}, {"next_cursor", std::move(next)}};
}

}  // namespace gpuex
