// See gate.hpp.
#include "server/gate.hpp"

namespace gpuex {
namespace {

// Answers through `respond` with the limit headers set; refuses with 429 when the bucket is empty.
bool admit(RateLimiter& limiter, const std::string& key, http::Respond& respond) {
  auto d = limiter.take(key);
  http::Respond inner = std::move(respond);
  respond = [inner, d](http::Response res) {
    res.set("RateLimit-Limit", std::to_string(d.limit));
    res.set("RateLimit-Remaining", std::to_string(d.remaining));
    inner(std::move(res));
  };
  if (d.allowed) return true;
  respond(rate_limited_response(d));
  return false;
}

}  // namespace

http::Response rate_limited_response(const RateLimiter::Decision& refused) {
  auto res = http::error_response(http::Status::too_many_requests, "rate_limited",
                                  "too many requests; retry after " + std::to_string(refused.retry_after_s) + " s");
  res.set(http::bhttp::field::retry_after, std::to_string(refused.retry_after_s));
  return res;
}

std::optional<std::string_view> bearer_token(const http::Request& request) {
  auto it = request.find(http::bhttp::field::authorization);
  if (it == request.end()) return std::nullopt;
  std::string_view value = it->value();
  constexpr std::string_view kScheme = "Bearer ";
  if (value.size() <= kScheme.size()) return std::nullopt;
  for (std::size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(value[i])) != std::tolower(static_cast<unsigned char>(kScheme[i]))) {
      return std::nullopt;
    }
  }
  return value.substr(kScheme.size());
}

http::Handler Gate::open(http::Handler handler) {
  return [this, handler = std::move(handler)](http::RequestContext& ctx, http::Respond respond) {
    if (!admit(per_ip_, ctx.remote_address, respond)) return;
    handler(ctx, std::move(respond));
  };
}

http::Handler Gate::scoped(Scopes any_of, http::Handler handler) {
  return [this, any_of, handler = std::move(handler)](http::RequestContext& ctx, http::Respond respond) {
    // A request without a valid key counts against its IP's limit (no key's limit is known): guessing
    // keys is throttled like public data.
    auto token = bearer_token(ctx.request);
    if (!token) {
      if (!admit(per_ip_, ctx.remote_address, respond)) return;
      return respond(http::error_response(http::Status::unauthorized, "unauthenticated",
                                          "send your API key as 'Authorization: Bearer <key>'"));
    }
    // A key the server has not seen yet costs a store lookup, limited per IP before it is made: a flood
    // of made-up keys is refused (429) without reaching PostgreSQL.
    auto allow_lookup = [this, &ctx, respond] {
      auto d = key_lookups_.take(ctx.remote_address);
      if (!d.allowed) respond(rate_limited_response(d));
      return d.allowed;
    };
    keys_.authenticate(*token, [this, any_of, &ctx, handler, respond](KeyStore::Outcome outcome,
                                                                       Principal principal) mutable {
      if (outcome == KeyStore::Outcome::throttled) return;  // answered 429 already
      if (outcome == KeyStore::Outcome::store_unavailable) {
        return respond(http::error_response(http::Status::service_unavailable, "store_unavailable",
                                            "the key cannot be checked: PostgreSQL does not answer"));
      }
      if (outcome != KeyStore::Outcome::ok) {
        if (!admit(per_ip_, ctx.remote_address, respond)) return;
        return respond(http::error_response(http::Status::unauthorized, "unauthenticated",
                                            "unknown or revoked API key"));
      }
      if (!admit(per_key_, principal.key_id, respond)) return;
      if ((principal.scopes & any_of) == 0) {
        return respond(http::error_response(http::Status::forbidden, "forbidden",
                                            "this key lacks the scope: " + scopes_to_string(any_of)));
      }
      ctx.principal = std::move(principal);
      handler(ctx, std::move(respond));
    }, allow_lookup);
  };
}

}  // namespace gpuex
