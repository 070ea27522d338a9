// See replay.hpp. One keep-alive HTTP connection, requests one after another, paced to the rate; every
// call is bounded in time; a 429 waits for its Retry-After and tries again.
#include "server/replay.hpp"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>
#include <boost/url/parse.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "matching/green_policy.hpp"
#include "matching/offers.hpp"
#include "server/decimal.hpp"
#include "server/rfc3339.hpp"
#include "server/wire.hpp"

namespace gpuex {
namespace {

namespace beast = boost::beast;
namespace bhttp = beast::http;
namespace net = boost::asio;
namespace json = boost::json;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

// Asks are open this long from the set-up; forward bids start at most 75 days ahead and last at most a
// week, so they fit inside.
constexpr std::int64_t kAskDays = 90;

std::atomic<bool> g_stop{false};  // lock-free: safe to set from a signal handler
void on_stop_signal(int) { g_stop.store(true); }

// The server could not be reached (or went away): the run ends with exit code 1.
struct Unreachable : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// The server refused the set-up (a bad admin key, say): the run ends with exit code 1.
struct Refused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// Sleeps up to `d`, waking early on a stop signal; false when stopped.
bool pause(Clock::duration d) {
  const auto until = Clock::now() + d;
  while (!g_stop.load()) {
    const auto left = until - Clock::now();
    if (left <= Clock::duration::zero()) return true;
    std::this_thread::sleep_for(std::min<Clock::duration>(left, std::chrono::milliseconds(50)));
  }
  return false;
}

struct Reply {
  unsigned status = 0;
  std::string body;
  long retry_after_s = 0;

  json::value json() const {
    boost::system::error_code ec;
    auto v = boost::json::parse(body, ec);
    return ec ? json::value(nullptr) : v;
  }
  // The error code of an error answer, or the status.
  std::string error_code() const {
    auto v = json();
    if (const auto* o = v.if_object()) {
      if (const auto* e = o->if_contains("error"); e && e->is_object()) {
        if (const auto* c = e->as_object().if_contains("code"); c && c->is_string()) return std::string(c->as_string());
      }
    }
    return std::to_string(status);
  }
};

// One keep-alive connection to gpuexd. Async Beast calls run with io_context::run_for, so no call can hang.
class Connection {
 public:
  Connection(std::string host, std::string port, std::chrono::seconds timeout)
      : host_(std::move(host)), port_(std::move(port)), timeout_(timeout) {}

  // Throws Unreachable on a network error (after one fresh try on a closed keep-alive connection).
  Reply request(bhttp::verb method, const std::string& target, const std::string& body, const std::string& key) {
    bhttp::request<bhttp::string_body> req{method, target, 11};
    req.set(bhttp::field::host, host_);
    req.set(bhttp::field::user_agent, "gpuexd-replay");
    req.keep_alive(true);
    if (!key.empty()) req.set(bhttp::field::authorization, "Bearer " + key);
    if (!body.empty()) req.set(bhttp::field::content_type, "application/json");
    req.body() = body;
    req.prepare_payload();
    for (int attempt = 0;; ++attempt) {
      try {
        if (!stream_) connect();
        beast::error_code ec;
        bhttp::async_write(*stream_, req, [&](beast::error_code e, std::size_t) { ec = e; });
        run(ec, "send");
        bhttp::response_parser<bhttp::string_body> parser;
        parser.body_limit(16 * 1024 * 1024);
        bhttp::async_read(*stream_, buffer_, parser, [&](beast::error_code e, std::size_t) { ec = e; });
        run(ec, "read");
        auto res = parser.release();
        Reply reply{res.result_int(), std::move(res.body()), 0};
        if (auto it = res.find(bhttp::field::retry_after); it != res.end()) {
          reply.retry_after_s = std::atol(std::string(it->value()).c_str());
        }
        if (!res.keep_alive()) stream_.reset();
        return reply;
      } catch (const Unreachable&) {
        stream_.reset();
        if (attempt > 0) throw;
      }
    }
  }

 private:
  void run(beast::error_code& ec, const char* what) {
    ioc_.restart();
    ioc_.run_for(timeout_);
    if (!ioc_.stopped()) {
      stream_->cancel();
      ioc_.restart();
      ioc_.run();
      throw Unreachable(std::string(what) + ": no answer within " + std::to_string(timeout_.count()) + " s");
    }
    if (ec) throw Unreachable(std::string(what) + ": " + ec.message());
  }

  void connect() {
    tcp::resolver resolver(ioc_);
    beast::error_code ec;
    auto endpoints = resolver.resolve(host_, port_, ec);
    if (ec) throw Unreachable("resolve " + host_ + ": " + ec.message());
    stream_.emplace(ioc_);
    buffer_.clear();
    stream_->async_connect(endpoints, [&](beast::error_code e, const tcp::endpoint&) { ec = e; });
    run(ec, "connect");
  }

  std::string host_, port_;
  std::chrono::seconds timeout_;
  net::io_context ioc_;
  std::optional<beast::tcp_stream> stream_;
  beast::flat_buffer buffer_;
};

// A pool made from an offer, as the buyers see it.
struct ReplayPool {
  std::string market;
  std::string region;
  matching::Tier tier{matching::Tier::bare_metal};
  std::int64_t gpus = 1;
  std::int64_t price = 0;  // the ask's list price, micro-dollars per GPU-hour
};

struct Counts {
  std::int64_t sent = 0, ok = 0, client_errors = 0, server_errors = 0, throttled = 0, trades = 0, gpus = 0;
  std::int64_t released = 0;  // spot leases given back early
  std::map<std::string, std::int64_t> codes;  // error codes of 4xx/5xx answers
};

class Replay {
 public:
  Replay(const ReplayOptions& o, std::string host, std::string port)
      : o_(o), conn_(std::move(host), std::move(port), std::chrono::seconds(15)), rng_(o.seed) {}

  int run() {
    const auto began = Clock::now();
    if (set_up()) std::printf("replay: set up %d pools (%d verified green) in %zu markets for %zu providers, and %zu buyers, in %.1f s\n",
                registered_, verified_, markets_used(), providers_, buyer_keys_.size(),
                std::chrono::duration<double>(Clock::now() - began).count());
    std::fflush(stdout);
    trade();
    return 0;
  }

 private:
  // A call that waits out 429s (Retry-After, at least a second) and tries again; network errors throw.
  Reply call(bhttp::verb method, const std::string& target, const json::value& body, const std::string& key) {
    const std::string text = body.is_null() ? std::string() : json::serialize(body);
    for (;;) {
      Reply r = conn_.request(method, target, text, key);
      if (r.status != 429) return r;
      ++counts_.throttled;
      if (!pause(std::chrono::seconds(std::max(1L, r.retry_after_s)))) return r;
    }
  }

  // A set-up call that must succeed with `expect`; 503s are retried for a while.
  json::value must(bhttp::verb method, const std::string& target, const json::value& body, const std::string& key,
                   unsigned expect, const char* what) {
    for (int attempt = 0;; ++attempt) {
      Reply r = call(method, target, body, key);
      if (g_stop.load()) throw Refused("stopped during set-up");
      if (r.status == expect) return r.json();
      if (r.status == 503 && attempt < 20 && pause(std::chrono::milliseconds(500))) continue;
      throw Refused(std::string(what) + " was refused: HTTP " + std::to_string(r.status) + " " + r.error_code() +
                    (r.status == 401 || r.status == 403 ? " (is --admin-key a key with the admin scope?)" : ""));
    }
  }

  std::string create_account(const std::string& name, std::initializer_list<const char*> scopes) {
    json::array s;
    for (const char* x : scopes) s.emplace_back(x);
    auto v = must(bhttp::verb::post, "/v1/accounts", json::object{{"name", name}, {"scopes", s}}, o_.admin_key, 201,
                  "creating an account");
    return std::string(v.at("api_key").as_string());
  }

  // False when an earlier run's accounts were reused (nothing new was made).
  bool set_up() {
    // The markets gpuexd trades, with their ticks.
    auto markets = must(bhttp::verb::get, "/v1/markets", nullptr, {}, 200, "reading the markets");
    for (const auto& m : markets.at("markets").as_array()) {
      ticks_[std::string(m.at("id").as_string())] = parse_fixed(m.at("tick_size").as_string(), 6).value_or(100);
    }

    std::ifstream in(o_.offers, std::ios::binary);
    if (!in) throw Refused("cannot read the offers file " + o_.offers);
    std::stringstream text;
    text << in.rdbuf();
    auto offers = matching::parse_offers(text.str(), o_.seed);
    // One pool per machine and market: the offer of the most GPUs (the whole machine), at its price.
    std::map<std::pair<std::int64_t, std::string>, std::size_t> by_machine;
    std::vector<matching::Offer> machines;
    for (auto& offer : offers) {
      std::string market(offer.pool.market.value());
      if (!ticks_.count(market)) continue;
      auto key = std::make_pair(offer.machine, std::move(market));
      auto it = by_machine.find(key);
      if (it == by_machine.end()) {
        by_machine.emplace(key, machines.size());
        machines.push_back(std::move(offer));
      } else if (offer.pool.gpus_per_node > machines[it->second].pool.gpus_per_node) {
        machines[it->second] = std::move(offer);
      }
    }
    if (machines.empty()) throw Refused("no offer of " + o_.offers + " maps to a market of this gpuexd");
    if (o_.max_pools > 0 && machines.size() > static_cast<std::size_t>(o_.max_pools)) {
      std::shuffle(machines.begin(), machines.end(), rng_);
      machines.resize(static_cast<std::size_t>(o_.max_pools));
    }

    for (const auto& offer : machines) {
      pools_.push_back({std::string(offer.pool.market.value()), offer.pool.region, offer.pool.tier,
                        std::int64_t{offer.pool.gpus_per_node} * offer.pool.nodes, offer.price.value});
    }
    if (reuse_accounts()) return false;

    // A provider account per country, as if each country's hosts sold through one firm.
    const std::string run_tag = std::to_string(unix_now());
    std::map<std::string, std::string> provider_keys;
    const auto policy = matching::GreenPolicy::defaults();
    const std::int64_t now = unix_now();
    for (const auto& offer : machines) {
      if (g_stop.load()) break;
      const auto& spec = offer.pool;
      auto& key = provider_keys[spec.region];
      if (key.empty()) key = create_account("replay provider " + spec.region + " " + run_tag, {"provide", "read"});
      auto pool = must(bhttp::verb::post, "/v1/pools", wire::pool_spec_body(spec), key, 201, "registering a pool");
      const std::string pool_id(pool.at("id").as_string());
      // The offers say nothing of energy; the loader drew it. Pools whose drawn values meet a green tier
      // are "verified" so the demo shows green discounts: demo evidence, not an audit.
      if (policy.classify(spec.energy)) {
        must(bhttp::verb::post, "/v1/pools/" + pool_id + "/verify",
             json::object{{"verified", true},
                          {"expires_at", format_rfc3339(now + 180 * 86400)},
                          {"evidence", "gpuexd replay: energy values drawn by the offers loader (demo, not an audit)"}},
             o_.admin_key, 200, "verifying a pool");
        ++verified_;
      }
      must(bhttp::verb::post, "/v1/orders",
           json::object{{"side", "sell"}, {"pool_id", pool_id}, {"price", format_price(offer.price.value)},
                        {"quantity", std::int64_t{spec.gpus_per_node} * spec.nodes}, {"start", format_rfc3339(now)},
                        {"end", format_rfc3339(now + kAskDays * 86400)}},
           key, 201, "posting an ask");
      ++registered_;
    }
    providers_ = provider_keys.size();
    for (int b = 0; b < o_.buyers && !g_stop.load(); ++b) {
      buyer_keys_.push_back(create_account("replay buyer " + std::to_string(b + 1) + " " + run_tag, {"trade", "read"}));
    }
    if (g_stop.load()) throw Refused("stopped during set-up");
    if (!o_.accounts.empty()) write_accounts(provider_keys);
    return true;
  }

  // With --accounts FILE from an earlier run on this database (its first buyer key still works): its
  // buyers trade again, against the pools and asks that run made.
  bool reuse_accounts() {
    if (o_.accounts.empty()) return false;
    std::ifstream in(o_.accounts);
    if (!in) return false;
    std::stringstream text;
    text << in.rdbuf();
    boost::system::error_code ec;
    auto v = json::parse(text.str(), ec);
    std::vector<std::string> buyers;
    if (!ec && v.is_object() && v.as_object().contains("buyers") && v.at("buyers").is_array()) {
      for (const auto& b : v.at("buyers").as_array()) {
        if (b.is_string()) buyers.emplace_back(b.as_string());
      }
    }
    if (buyers.empty()) return false;
    if (call(bhttp::verb::get, "/v1/orders?limit=1", nullptr, buyers.front()).status != 200) {
      std::printf("replay: the keys in %s are not this server's; making new accounts\n", o_.accounts.c_str());
      return false;
    }
    // The asks of an earlier run end 90 days after it: without one left, that market has nothing to sell.
    const json::array* providers = nullptr;
    if (const auto* p = v.as_object().if_contains("providers"); p && p->is_array()) providers = &p->as_array();
    const json::value* first_key = nullptr;
    if (providers && !providers->empty() && providers->front().is_object()) {
      first_key = providers->front().as_object().if_contains("api_key");
    }
    if (!first_key || !first_key->is_string() || !has_open_order(std::string(first_key->as_string()))) {
      std::printf("replay: the asks of %s's accounts have ended; making new accounts and asks\n", o_.accounts.c_str());
      return false;
    }
    buyer_keys_ = std::move(buyers);
    providers_ = providers->size();
    std::printf("replay: reusing the %zu buyers of %s (pools and asks from an earlier run)\n", buyer_keys_.size(),
                o_.accounts.c_str());
    return true;
  }

  bool has_open_order(const std::string& key) {
    Reply r = call(bhttp::verb::get, "/v1/orders?status=open&limit=1", nullptr, key);
    if (r.status != 200) return false;
    auto v = r.json();
    const json::value* orders = v.is_object() ? v.as_object().if_contains("orders") : nullptr;
    return orders && orders->is_array() && !orders->as_array().empty();
  }

  // The keys of the accounts made, so a person (or a test) can look at the market as one of them.
  void write_accounts(const std::map<std::string, std::string>& provider_keys) const {
    json::array providers, buyers;
    for (const auto& [region, key] : provider_keys) providers.push_back(json::object{{"region", region}, {"api_key", key}});
    for (const auto& key : buyer_keys_) buyers.emplace_back(key);
    const std::string tmp = o_.accounts + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      // API keys: readable by their owner only, before any is written.
      std::error_code ec;
      std::filesystem::permissions(tmp, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write, ec);
      if (ec) throw Refused("cannot restrict " + tmp + " to its owner: " + ec.message());
      out << json::serialize(json::object{{"providers", providers}, {"buyers", buyers}}) << '\n';
      if (!out) throw Refused("cannot write " + o_.accounts);
    }
    if (std::rename(tmp.c_str(), o_.accounts.c_str()) != 0) throw Refused("cannot write " + o_.accounts);
  }

  std::size_t markets_used() const {
    std::map<std::string, int> m;
    for (const auto& p : pools_) ++m[p.market];
    return m.size();
  }

  std::int64_t between(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng_);
  }
  bool chance(int percent) { return between(1, 100) <= percent; }

  // A buy priced around a random pool's ask (80 % to 125 % of it, to the tick), so that a fair share
  // trades: spot bids for hours, forward bids for days some weeks ahead, a quarter with a constraint.
  // (Integer arithmetic on micro-dollars: no floats for money.)
  json::object next_order() {
    const ReplayPool& p = pools_[static_cast<std::size_t>(between(0, static_cast<std::int64_t>(pools_.size()) - 1))];
    const std::int64_t tick = ticks_.at(p.market);
    const std::int64_t price = std::max(tick, p.price * between(8000, 12500) / 10000 / tick * tick);
    static constexpr std::int64_t kQuantities[] = {1, 1, 1, 2, 2, 4, 8};
    const std::int64_t now = unix_now();
    json::object o{{"side", "buy"},
                   {"market", p.market},
                   {"price", format_price(price)},
                   {"quantity", kQuantities[between(0, 6)]},
                   {"client_order_id", "replay-" + std::to_string(o_.seed) + "-" + std::to_string(now) + "-" +
                                           std::to_string(counts_.sent)}};
    if (chance(70)) {
      static constexpr std::int64_t kHours[] = {1, 1, 2, 4, 8};
      o["duration"] = kHours[between(0, 4)] * 3600;
      if (chance(50)) {
        o["time_in_force"] = "ioc";
      } else {
        o["time_in_force"] = "gtd";
        o["expire_at"] = format_rfc3339(now + between(300, 1800));
      }
    } else {
      const std::int64_t start = (now / 86400 + between(2, 75)) * 86400;  // a day boundary, 2 to 75 days ahead
      static constexpr std::int64_t kDays[] = {1, 2, 7};
      o["start"] = format_rfc3339(start);
      o["end"] = format_rfc3339(start + kDays[between(0, 2)] * 86400);
      o["time_in_force"] = "gtd";
      o["expire_at"] = format_rfc3339(now + between(600, 3600));
    }
    // Spot-tier capacity is only for interruptible bids.
    if (p.tier == matching::Tier::spot ? chance(70) : chance(5)) o["interruptible"] = true;
    if (chance(25)) {
      switch (between(0, 5)) {
        case 0: o["regions"] = json::array{json::value(p.region)}; break;
        case 1: o["tiers"] = json::array{json::value("bare_metal"), json::value("instance")}; break;
        case 2: o["nvlink"] = true; break;
        case 3: o["green_only"] = true; break;
        case 4: o["min_sla_pct"] = "99"; break;
        default: o["min_fabric"] = "roce"; break;
      }
    }
    return o;
  }

  void progress(Clock::time_point began, const char* prefix) {
    const double s = std::chrono::duration<double>(Clock::now() - began).count();
    std::printf("%s%.0f s: %lld orders sent (%.1f/s), 2xx %lld, 4xx %lld, 5xx %lld, 429 waits %lld; %lld trades, %lld GPUs; "
                "%lld leases released early\n",
                prefix, s, static_cast<long long>(counts_.sent), s > 0 ? static_cast<double>(counts_.sent) / s : 0.0,
                static_cast<long long>(counts_.ok), static_cast<long long>(counts_.client_errors),
                static_cast<long long>(counts_.server_errors), static_cast<long long>(counts_.throttled),
                static_cast<long long>(counts_.trades), static_cast<long long>(counts_.gpus),
                static_cast<long long>(counts_.released));
    std::fflush(stdout);
  }

  void trade() {
    const auto began = Clock::now();
    const auto interval = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(1.0 / o_.rate));
    auto next_send = began;
    auto next_progress = began + std::chrono::seconds(o_.progress_every_s);
    while (!g_stop.load()) {
      const auto now = Clock::now();
      if (o_.seconds > 0 && now - began >= std::chrono::seconds(o_.seconds)) break;
      if (now >= next_progress) {
        progress(began, "replay: ");
        next_progress += std::chrono::seconds(o_.progress_every_s);
      }
      // Buyers give back some spot leases early, so capacity cycles and the market keeps trading.
      if (!releases_.empty() && releases_.begin()->first <= now) {
        const auto [lease, buyer] = releases_.begin()->second;
        releases_.erase(releases_.begin());
        Reply r = call(bhttp::verb::post, "/v1/leases/" + lease + "/release", nullptr, buyer_keys_[buyer]);
        if (r.status == 200) ++counts_.released;
        continue;
      }
      if (now < next_send) {
        auto wake = std::min(next_send, next_progress);
        if (!releases_.empty()) wake = std::min(wake, releases_.begin()->first);
        pause(wake - now);
        continue;
      }
      // Far behind (the server slowed us, or we waited out a 429): pick up from now, no burst.
      next_send = std::max(next_send + interval, now - std::chrono::seconds(1));
      const auto buyer = static_cast<std::size_t>(counts_.sent % static_cast<std::int64_t>(buyer_keys_.size()));
      const json::object order = next_order();
      Reply r = call(bhttp::verb::post, "/v1/orders", order, buyer_keys_[buyer]);
      ++counts_.sent;
      if (r.status >= 200 && r.status < 300) {
        ++counts_.ok;
        auto v = r.json();
        if (const auto* o = v.if_object(); o && o->contains("fills")) {
          for (const auto& f : o->at("fills").as_array()) {
            ++counts_.trades;
            counts_.gpus += f.at("quantity").as_int64();
            if (order.contains("duration") && chance(80)) {
              releases_.emplace(Clock::now() + std::chrono::seconds(between(30, 300)),
                                std::make_pair(std::string(f.at("lease_id").as_string()), buyer));
            }
          }
        }
      } else {
        ++(r.status >= 500 ? counts_.server_errors : counts_.client_errors);
        ++counts_.codes[r.error_code()];
      }
    }
    progress(began, "replay: stopped after ");
    if (!counts_.codes.empty()) {
      std::string codes;
      for (const auto& [c, n] : counts_.codes) codes += (codes.empty() ? "" : ", ") + c + " " + std::to_string(n);
      std::printf("replay: error answers by code: %s\n", codes.c_str());
    }
  }

  const ReplayOptions& o_;
  Connection conn_;
  std::mt19937_64 rng_;
  std::map<std::string, std::int64_t> ticks_;
  std::vector<ReplayPool> pools_;
  std::vector<std::string> buyer_keys_;
  std::size_t providers_ = 0;
  int verified_ = 0;
  int registered_ = 0;  // pools (with their asks) made by this run
  Counts counts_;
  std::multimap<Clock::time_point, std::pair<std::string, std::size_t>> releases_;  // lease id, buyer; by when
};

}  // namespace

int replay(const ReplayOptions& options) {
  auto url = boost::urls::parse_uri(options.url);
  if (!url || url->scheme() != "http" || url->encoded_host().empty() ||
      (url->encoded_path() != "" && url->encoded_path() != "/")) {
    std::fprintf(stderr, "replay: --url must be http://HOST[:PORT] (plain HTTP), not %s\n", options.url.c_str());
    return 2;
  }
  if (options.rate <= 0 || options.rate > 100'000 || options.buyers < 1) {
    std::fprintf(stderr, "replay: --rate must be in (0, 100000] and --buyers at least 1\n");
    return 2;
  }
  const std::string port = url->has_port() ? std::string(url->port()) : "80";
  g_stop.store(false);
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  std::printf("replay: %s, offers %s, %.1f orders/s over %d buyers, seed %llu%s\n", options.url.c_str(),
              options.offers.c_str(), options.rate, options.buyers, static_cast<unsigned long long>(options.seed),
              options.seconds > 0 ? (", for " + std::to_string(options.seconds) + " s").c_str() : ", until Ctrl-C");
  std::fflush(stdout);
  try {
    Replay r(options, std::string(url->encoded_host()), port);
    return r.run();
  } catch (const Unreachable& e) {
    std::fprintf(stderr, "replay: cannot reach gpuexd at %s (%s)\n", options.url.c_str(), e.what());
  } catch (const Refused& e) {
    std::fprintf(stderr, "replay: %s\n", e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "replay: %s\n", e.what());
  }
  return 1;
}

}  // namespace gpuex
