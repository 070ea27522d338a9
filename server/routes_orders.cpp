// Orders and fills: place, read, cancel, amend; every write acknowledged after commit.
#include <boost/json.hpp>

#include "server/store/writer.hpp"
#include "server/decimal.hpp"
#include "server/json_fields.hpp"
#include "server/routes.hpp"
#include "server/rfc3339.hpp"
#include "server/wire.hpp"

namespace gpuex {

using http::bhttp::verb;
using namespace matching;
namespace json = boost::json;

namespace {

constexpr const char* kOrderByClientId =
    "SELECT doc::text, body_sha256 = $3::bytea, id FROM orders WHERE account_id = $1 AND client_order_id = $2";
constexpr const char* kOrderById = "SELECT doc::text FROM orders WHERE id = $1 AND account_id = $2";
constexpr const char* kFillsOfOrder = R"sql(
SELECT CASE WHEN buy_order_id = $1 THEN buyer_fill ELSE seller_fill END::text
FROM trades WHERE (buy_order_id = $1 AND buyer_id = $2) OR (sell_order_id = $1 AND seller_id = $2) ORDER BY id)sql";
// Both listings read orders_account_listing (account_id, open, id DESC; migration 0012): the open
// orders its `true` entries, all orders its `true` and `false` entries merged by id, each side
// stopping at the page size. "IS TRUE" / "IS FALSE" are the forms the planner matches against the
// index's boolean key (a bare `status IN (...)` would be a filter over every order of the account).
constexpr const char* kListOpenOrders = R"sql(
SELECT doc::text, id FROM orders
WHERE account_id = $1 AND (status IN ('open', 'partially_filled')) IS TRUE AND id < $2
  AND ($3::text IS NULL OR market = $3)
ORDER BY id DESC LIMIT $4)sql";
constexpr const char* kListAllOrders = R"sql(
SELECT doc::text, id FROM (
  (SELECT doc, id FROM orders
   WHERE account_id = $1 AND (status IN ('open', 'partially_filled')) IS TRUE AND id < $2
     AND ($3::text IS NULL OR market = $3)
   ORDER BY id DESC LIMIT $4)
  UNION ALL
  (SELECT doc, id FROM orders
   WHERE account_id = $1 AND (status IN ('open', 'partially_filled')) IS FALSE AND id < $2
     AND ($3::text IS NULL OR market = $3)
   ORDER BY id DESC LIMIT $4)) listed
ORDER BY id DESC LIMIT $4)sql";
constexpr const char* kListFills = R"sql(
SELECT CASE WHEN buyer_id = $1 THEN buyer_fill ELSE seller_fill END::text, id FROM trades
WHERE (buyer_id = $1 OR seller_id = $1) AND id < $2 AND ($3::text IS NULL OR market = $3) AND at >= $4
ORDER BY id DESC LIMIT $5)sql";

// A store check of a client_order_id older than this is done again (see engine_runner.cpp).
constexpr auto kMaxCheckAge = std::chrono::seconds(5);

Scope scope_for(Side side) { return side == Side::buy ? Scope::trade : Scope::provide; }

http::Response forbidden_side(Side side) {
  return http::error_response(http::Status::forbidden, "forbidden",
                              side == Side::buy ? "buy orders need a key with the trade scope"
                                                : "sell orders need a key with the provide scope");
}

// {"order": ..., "fills": [...]} for the order `id` out of one command's events.
json::object order_with_fills(const EventSink& events, OrderId id) {
  json::array fills;
  const Order* last = nullptr;
  for (const auto& e : events) {
    std::visit(
        [&](const auto& ev) {
          using E = std::decay_t<decltype(ev)>;
          if constexpr (std::is_same_v<E, OrderAccepted> || std::is_same_v<E, OrderRejected> ||
                        std::is_same_v<E, OrderUpdated> || std::is_same_v<E, OrderDone> ||
                        std::is_same_v<E, OrderDuplicate>) {
            if (ev.order.id == id) last = &ev.order;
          } else if constexpr (std::is_same_v<E, TradeEvent>) {
            if (ev.trade.buy_order == id) fills.push_back(wire::fill_json(ev.trade, Side::buy));
            else if (ev.trade.sell_order == id) fills.push_back(wire::fill_json(ev.trade, Side::sell));
          }
        },
        e);
  }
  json::object out;
  out["order"] = last ? json::value(wire::order_json(*last)) : json::value(nullptr);
  out["fills"] = std::move(fills);
  return out;
}

// Engine rejects answer 422 (with the stored order's id) every time the same body is sent;
// matching outcomes (would_take, self_trade, unfilled ioc/fok) are a 201 order.
bool is_engine_reject(std::string_view reason) {
  for (auto r : {Reason::insufficient_pool_capacity, Reason::window_in_past, Reason::quantity_not_multiple_of_chunk,
                 Reason::exposure_limit, Reason::market_halted, Reason::off_tick, Reason::not_found}) {
    if (to_string(r) == reason) return true;
  }
  return false;
}

http::Response engine_reject(std::string_view reason, std::string_view order_id) {
  if (reason == to_string(Reason::not_found)) return not_found("market or pool");
  json::object error = rule_error(reason);
  error["order_id"] = order_id;
  return http::json_response(http::Status::unprocessable_entity, {{"error", std::move(error)}});
}

// The `market` query parameter of a list or a cancel-all: absent, or a market this exchange lists (an
// unknown one, or bytes that are no market name at all, is a 404 before anything reads the store).
std::variant<store::Param, http::Response> market_filter(const Services& services, const http::RequestContext& ctx) {
  auto m = query_param(ctx, "market");
  if (!m) return store::Param{};
  if (!services.markets.count(*m)) return not_found("market", "market");
  return store::Param{std::move(*m)};
}

// The answer to an order that already exists (a repeat): its stored state, or its engine reject again.
http::Response existing_order(json::value order, json::array fills) {
  const auto& o = order.as_object();
  if (o.at("status").as_string() == "rejected" && o.contains("reject_reason") &&
      is_engine_reject(o.at("reject_reason").as_string())) {
    return engine_reject(o.at("reject_reason").as_string(), o.at("id").as_string());
  }
  return http::json_response(http::Status::ok, {{"order", std::move(order)}, {"fills", std::move(fills)}});
}

// A stored order document is as of the order's last event, but an open sell's lapsed and remaining
// hours and its free steps move with the clock without one: such documents (the whole answer, or each
// of `list`) are replaced by the engine's view now, answered once what that view holds has committed.
void answer_orders_now(Services& services, AccountId account, json::value body, const char* list,
                       http::Respond respond) {
  auto open_sells = [list](json::value& b) {
    std::vector<json::value*> out;
    auto consider = [&out](json::value& doc) {
      const auto& o = doc.as_object();
      const auto& status = o.at("status").as_string();
      if (o.at("side").as_string() == "sell" && (status == "open" || status == "partially_filled")) out.push_back(&doc);
    };
    if (!list) consider(b);
    else for (auto& doc : b.as_object().at(list).as_array()) consider(doc);
    return out;
  };
  if (open_sells(body).empty()) return respond(http::json_response(http::Status::ok, std::move(body)));
  answer_committed(
      services,
      [body = std::move(body), open_sells, account](const Engine& engine) mutable {
        for (json::value* doc : open_sells(body)) {
          auto o = engine.order_now(OrderId(std::stoll(std::string(doc->as_object().at("id").as_string()))));
          if (o && o->account == account) *doc = wire::order_json(*o);
        }
        return http::json_response(http::Status::ok, std::move(body));
      },
      std::move(respond));
}

// An open order of this account, of a side its key may trade.
EngineRunner::Admit own_open_order(OrderId id, AccountId account, Scopes scopes) {
  return [id, account, scopes](const Engine& engine) {
    const Order* o = engine.order(id);
    return o && o->account == account && has_scope(scopes, scope_for(o->request.side));
  };
}

const CommandRejected* rejection(const EventSink& events) {
  for (const auto& e : events) {
    if (const auto* r = std::get_if<CommandRejected>(&e)) return r;
  }
  return nullptr;
}

http::Response answer_placement(const EventSink& events, Seq seq) {
  for (const auto& e : events) {
    if (const auto* dup = std::get_if<OrderDuplicate>(&e)) {
      // Fills of an in-flight original are in its own answer; the repeat shows the order as it is.
      return existing_order(wire::order_json(dup->order), {});
    }
    if (const auto* rej = std::get_if<OrderRejected>(&e); rej && rej->order.id == OrderId(seq)) {
      return engine_reject(to_string(rej->order.reason), std::to_string(seq));
    }
  }
  if (const auto* r = rejection(events)) {
    if (r->reason == Reason::not_found) return not_found("market or pool");
    return http::error_response(http::Status::unprocessable_entity, to_string(r->reason),
                                "the order was not placed: " + std::string(to_string(r->reason)));
  }
  return http::json_response(http::Status::created, order_with_fills(events, OrderId(seq)));
}

void place(Services& services, const http::RequestContext& ctx, OrderRequest request,
           std::chrono::steady_clock::time_point checked_at, http::Respond respond) {
  AccountId account(ctx.principal->account_id);
  auto admit = [request, account, checked_at](const Engine& engine) {
    if (std::chrono::steady_clock::now() - checked_at > kMaxCheckAge) return false;
    if (request.side == Side::sell) {
      const Pool* pool = engine.pool(request.pool);
      return pool && pool->provider == account && !pool->retired;
    }
    return true;
  };
  auto refused = [checked_at]() {
    if (std::chrono::steady_clock::now() - checked_at > kMaxCheckAge) {
      auto res = http::error_response(http::Status::service_unavailable, "not_ready", "the exchange is busy; retry");
      res.set(http::bhttp::field::retry_after, "1");
      return res;
    }
    return not_found("pool", "pool_id");
  };
  run_command(services, account, PlaceOrder{std::move(request)}, admit, answer_placement, refused, std::move(respond));
}

}  // namespace

void add_order_routes(http::Router& router, Services& services) {
  const Scopes trade_or_provide = Scope::trade | Scope::provide;
  const Scopes read = static_cast<Scopes>(Scope::read);

  router.add(verb::post, "/v1/orders", services.gate.scoped(trade_or_provide, [&services](http::RequestContext& ctx,
                                                                                         http::Respond respond) {
    auto body = parse_json_body(ctx.request);
    if (auto* err = std::get_if<http::Response>(&body)) return respond(std::move(*err));
    JsonFields fields(std::get<json::object>(body));
    OrderRequest request = wire::read_order_request(fields);
    if (auto err = fields.finish()) return respond(std::move(*err));
    if (!has_scope(ctx.principal->scopes, scope_for(request.side))) return respond(forbidden_side(request.side));
    if (request.side == Side::buy && !services.markets.count(request.market.value())) {
      return respond(not_found("market", "market"));
    }
    if (request.client_order_id.empty()) return place(services, ctx, std::move(request), std::chrono::steady_clock::now(), respond);

    // client_order_ids are never recycled: an older order with this id answers from the store; the
    // engine answers for open and in-flight ones.
    auto checked_at = std::chrono::steady_clock::now();
    services.queries.submit(
        [&services, &ctx, request, checked_at, respond](store::PgConnection& db) mutable {
          auto account = std::to_string(ctx.principal->account_id);
          auto row = db.exec(kOrderByClientId, {account, request.client_order_id, store::request_sha256(request)});
          if (row.rows() == 0) return place(services, ctx, std::move(request), checked_at, respond);
          if (row.text(0, 1) != "t") {
            return respond(http::error_response(http::Status::unprocessable_entity, "idempotency_conflict",
                                                "client_order_id was used before for a different order",
                                                "client_order_id"));
          }
          std::string id(row.text(0, 2));
          json::array fills;
          auto fill_rows = db.exec(kFillsOfOrder, {id, account});
          for (int i = 0; i < fill_rows.rows(); ++i) fills.push_back(json::parse(fill_rows.text(i, 0)));
          respond(existing_order(json::parse(row.text(0, 0)), std::move(fills)));
        },
        [respond](const std::string&) { respond(store_unavailable_response()); });
  }));

  router.add(verb::get, "/v1/orders", services.gate.scoped(read, [&services](http::RequestContext& ctx,
                                                                            http::Respond respond) {
    auto page = read_page(ctx);
    if (auto* err = std::get_if<http::Response>(&page)) return respond(std::move(*err));
    auto status = query_param(ctx, "status").value_or("open");
    if (status != "open" && status != "all") {
      return respond(http::error_response(http::Status::bad_request, "invalid_field", "status must be open or all", "status"));
    }
    auto market = market_filter(services, ctx);
    if (auto* err = std::get_if<http::Response>(&market)) return respond(std::move(*err));
    services.queries.submit(
        [&services, respond, account = ctx.principal->account_id, p = std::get<Page>(page), status,
         market = std::get<store::Param>(market)](store::PgConnection& db) {
          auto rows = db.exec(status == "all" ? kListAllOrders : kListOpenOrders,
                              {std::to_string(account), std::to_string(p.before), market, std::to_string(p.limit + 1)});
          answer_orders_now(services, AccountId(account), page_json(rows, p, "orders"), "orders", respond);
        },
        [respond](const std::string&) { respond(store_unavailable_response()); });
  }));

  auto get_one = [&services](const char* sql, std::string key, http::RequestContext& ctx, http::Respond respond) {
    services.queries.submit(
        [&services, respond, sql, key, account = ctx.principal->account_id](store::PgConnection& db) {
          auto row = db.exec(sql, {key, std::to_string(account)});
          if (row.rows() == 0) return respond(not_found("order"));
          answer_orders_now(services, AccountId(account), json::parse(row.text(0, 0)), nullptr, respond);
        },
        [respond](const std::string&) { respond(store_unavailable_response()); });
  };

  router.add(verb::get, "/v1/orders/{id}", services.gate.scoped(read, [get_one](http::RequestContext& ctx,
                                                                               http::Respond respond) {
    auto id = path_id(ctx, "id");
    if (!id) return respond(not_found("order"));
    get_one(kOrderById, std::to_string(*id), ctx, std::move(respond));
  }));

  router.add(verb::get, "/v1/orders/by-client-id/{cid}", services.gate.scoped(read, [get_one](http::RequestContext& ctx,
                                                                                              http::Respond respond) {
    get_one("SELECT doc::text FROM orders WHERE client_order_id = $1 AND account_id = $2",
            ctx.path_params.at("cid"), ctx, std::move(respond));
  }));

  // Cancel one order.
  router.add(verb::delete_, "/v1/orders/{id}", services.gate.scoped(trade_or_provide, [&services](http::RequestContext& ctx,
                                                                                                 http::Respond respond) {
    auto id = path_id(ctx, "id");
    if (!id) return respond(not_found("order"));
    AccountId account(ctx.principal->account_id);
    OrderId order(*id);
    run_command(
        services, account, Cancel{order}, own_open_order(order, account, ctx.principal->scopes),
        [order](const EventSink& events, Seq) {
          auto out = order_with_fills(events, order);
          if (out["order"].is_null()) {
            return http::error_response(http::Status::conflict, "order_not_open", "the order is no longer open");
          }
          return http::json_response(http::Status::ok, out["order"]);
        },
        [] { return not_found("open order (it may have ended, or belong to another account)"); }, std::move(respond));
  }));

  // Amend: a lower quantity keeps priority; a new price loses it.
  router.add(verb::patch, "/v1/orders/{id}", services.gate.scoped(trade_or_provide, [&services](http::RequestContext& ctx,
                                                                                                http::Respond respond) {
    auto id = path_id(ctx, "id");
    if (!id) return respond(not_found("order"));
    auto body = parse_json_body(ctx.request);
    if (auto* err = std::get_if<http::Response>(&body)) return respond(std::move(*err));
    JsonFields fields(std::get<json::object>(body));
    Amend amend{OrderId(*id), std::nullopt, std::nullopt};
    if (auto q = fields.integer("quantity", Need::optional, 1, wire::kMaxQuantity)) amend.quantity = Qty(*q);
    if (auto p = fields.decimal("price", Need::optional, 6, 1, wire::kMaxPriceMicros)) amend.price = Price(*p);
    if (fields.ok() && !amend.quantity && !amend.price) fields.fail("missing_field", "quantity", "send quantity, price or both");
    if (auto err = fields.finish()) return respond(std::move(*err));
    AccountId account(ctx.principal->account_id);
    OrderId order(*id);
    run_command(
        services, account, amend, own_open_order(order, account, ctx.principal->scopes),
        [order](const EventSink& events, Seq) {
          if (const auto* r = rejection(events)) {
            // The rule's sentence; its field only if the PATCH body has it (a halted market names `market`).
            json::object error = rule_error(to_string(r->reason));
            if (const auto* f = error.if_contains("field"); f && *f != "quantity" && *f != "price") error.erase("field");
            return http::json_response(http::Status::unprocessable_entity, {{"error", std::move(error)}});
          }
          return http::json_response(http::Status::ok, order_with_fills(events, order));
        },
        [] { return not_found("open order"); }, std::move(respond));
  }));

  // Cancel all own open orders (in one market).
  router.add(verb::delete_, "/v1/orders", services.gate.scoped(trade_or_provide, [&services](http::RequestContext& ctx,
                                                                                            http::Respond respond) {
    CancelAll all;
    auto market = market_filter(services, ctx);
    if (auto* err = std::get_if<http::Response>(&market)) return respond(std::move(*err));
    if (const auto& m = std::get<store::Param>(market)) all.market = MarketId{*m};
    const AccountId account(ctx.principal->account_id);
    run_command(
        services, account, all, nullptr,
        [account](const EventSink& events, Seq) {
          json::array cancelled;
          for (const auto& e : events) {
            const auto* d = std::get_if<OrderDone>(&e);
            if (d && d->order.account == account) cancelled.push_back(wire::order_json(d->order));
          }
          return http::json_response(http::Status::ok, {{"cancelled", std::move(cancelled)}});
        },
        [] { return not_found("order"); }, std::move(respond));
  }));

  router.add(verb::get, "/v1/fills", services.gate.scoped(read, [&services](http::RequestContext& ctx, http::Respond respond) {
    auto page = read_page(ctx);
    if (auto* err = std::get_if<http::Response>(&page)) return respond(std::move(*err));
    auto market_or_error = market_filter(services, ctx);
    if (auto* err = std::get_if<http::Response>(&market_or_error)) return respond(std::move(*err));
    const store::Param market = std::get<store::Param>(market_or_error);
    std::int64_t since = 0;
    if (auto s = query_param(ctx, "since")) {
      auto t = parse_rfc3339(*s);
      if (!t) return respond(http::error_response(http::Status::bad_request, "invalid_field", "since must be an RFC 3339 time from 1970 to 9999", "since"));
      since = *t;
    }
    services.queries.submit(
        [respond, account = ctx.principal->account_id, p = std::get<Page>(page), market, since](store::PgConnection& db) {
          auto rows = db.exec(kListFills, {std::to_string(account), std::to_string(p.before), market,
                                           std::to_string(since), std::to_string(p.limit + 1)});
          respond(http::json_response(http::Status::ok, page_json(rows, p, "fills")));
        },
        [respond](const std::string&) { respond(store_unavailable_response()); });
  }));
}

}  // namespace gpuex
