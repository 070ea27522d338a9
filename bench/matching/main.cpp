// bench_matching: commands per second, latency per command and memory per resting order of the
// matching engine, on one thread. `scripts/bench matching [--json] [--commands N]`.
//
// plain:     one market, one pool, spot asks and bids without constraints: ~70 % places (1 in 7
//            crossing), ~30 % cancels, over a book of 10,000 resting orders.
// realistic: 10 markets, 2,000 pools sampled from the real offers in data/ (regions, prices, fees;
//            tier, fabric, SLA and energy drawn by the same seeded loader the replay tool uses),
//            forward windows up to 6 months, bids with a mix of constraints, 100,000 resting orders;
//            ~65 % places (1 in 4 crossing), ~35 % cancels.
#include <jemalloc/jemalloc.h>
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "alloc/engine_heap.hpp"
#include "matching/engine.hpp"
#include "matching/offers.hpp"

using namespace gpuex::matching;
using Clock = std::chrono::steady_clock;

namespace {

struct Rng {
  std::uint64_t s;
  std::uint64_t next() {
    std::uint64_t z = (s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::int64_t between(std::int64_t lo, std::int64_t hi) { return lo + static_cast<std::int64_t>(next() % static_cast<std::uint64_t>(hi - lo + 1)); }
  bool chance(int percent) { return static_cast<int>(next() % 100) < percent; }
};

constexpr std::int64_t kT0 = 1'800'000'000;  // 2027-01-15
constexpr std::int64_t kDay = 86'400;

// The orders resting now (for cancels) with their accounts, kept from the engine's events: the bench's own
// bookkeeping, outside the timed apply but in the thread's CPU time, so kept cheap (order ids are command
// sequence numbers: a dense position table instead of a hash map, and the account stored instead of asked
// of Engine::order() for every cancel). reserve() before the fill keeps it out of the measured heap growth.
struct Resting {
  static constexpr std::uint32_t kNone = 0xffffffffu;
  std::vector<OrderId> ids;
  std::vector<AccountId> accounts;  // accounts[i] placed ids[i]
  std::vector<std::uint32_t> where;  // by id: position in ids, or kNone
  std::vector<std::uint8_t> sides;   // by id, 1 + Side, kept only for --by-kind (a cancel's side)
  bool keep_sides = false;
  void reserve(std::size_t orders, std::size_t max_id) {
    ids.reserve(orders);
    accounts.reserve(orders);
    where.reserve(max_id);
  }
  void add(OrderId id, AccountId account) {
    const auto v = static_cast<std::size_t>(id.value);
    if (v >= where.size()) where.resize(std::max(v + 1, where.size() * 2), kNone);
    if (where[v] != kNone) return;
    where[v] = static_cast<std::uint32_t>(ids.size());
    ids.push_back(id);
    accounts.push_back(account);
  }
  void remove(OrderId id) {
    const auto v = static_cast<std::size_t>(id.value);
    if (v >= where.size() || where[v] == kNone) return;
    const std::uint32_t i = where[v];
    where[v] = kNone;
    if (i + 1 != ids.size()) {
      ids[i] = ids.back();
      accounts[i] = accounts.back();
      where[static_cast<std::size_t>(ids[i].value)] = i;
    }
    ids.pop_back();
    accounts.pop_back();
  }
  void note_side(OrderId id, Side side) {
    const auto v = static_cast<std::size_t>(id.value);
    if (v >= sides.size()) sides.resize(std::max(v + 1, sides.size() * 2), 0);
    sides[v] = static_cast<std::uint8_t>(1 + static_cast<int>(side));
  }
  void track(const EventSink& events) {
    for (const auto& e : events) {
      if (const auto* a = std::get_if<OrderAccepted>(&e)) {
        add(a->order.id, a->order.account);
        if (keep_sides) note_side(a->order.id, a->order.request.side);
      }
      else if (const auto* d = std::get_if<OrderDone>(&e)) remove(d->order.id);
    }
  }
};

struct Driver {
  Engine engine;
  Seq seq = 0;
  std::int64_t now = kT0;
  EventSink events;
  Resting resting;

  explicit Driver(EngineConfig config) : engine(std::move(config)) {}

  void apply(AccountId account, CommandBody body) {
    events.clear();
    engine.apply(Command{++seq, Seconds(now), account, std::move(body)}, events);
    resting.track(events);
  }
};

struct Result {
  std::string workload;
  std::string description;
  std::int64_t commands = 0;
  double seconds = 0;
  double cpu_seconds = 0;  // CPU time of this thread over the same loop (excludes time the OS ran others)
  double p50_us = 0, p99_us = 0, p999_us = 0;
  double bytes_per_resting_order = 0;
  std::size_t resting = 0;
};

double pct(std::vector<std::uint32_t>& ns, double p) {
  if (ns.empty()) return 0;
  std::size_t i = std::min(ns.size() - 1, static_cast<std::size_t>(p * static_cast<double>(ns.size())));
  std::nth_element(ns.begin(), ns.begin() + static_cast<std::ptrdiff_t>(i), ns.end());
  return ns[i] / 1000.0;
}

// Heap in use: the bytes jemalloc (gpuexd's allocator, linked here too) has handed out and not had back,
// large blocks such as the engine's order slabs included. Objects freed into this thread's cache still count as
// handed out until the cache is flushed, and when it flushes on its own depends on everything the thread
// allocated before (a different --engine-heap-mib moved the figure by up to 6 bytes a resting order): flushed here.
std::size_t heap_in_use() {
  mallctl("thread.tcache.flush", nullptr, nullptr, nullptr, 0);
  std::uint64_t epoch = 1;
  std::size_t size = sizeof epoch;
  mallctl("epoch", &epoch, &size, &epoch, size);  // refreshes the statistics
  std::size_t allocated = 0;
  size = sizeof allocated;
  if (mallctl("stats.allocated", &allocated, &size, nullptr, 0) != 0) return 0;
  return allocated;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// --by-kind: what the slowest commands were. Each timed command's kind, what it did (from its events) and what
// happened around it (bytes jemalloc handed out and took back on this thread; with --faults also minor page
// faults and context switches, two getrusage calls a command), all read outside the timed span; the summary
// goes to stderr, so stdout and its keys stay as they are. The reads between commands make this run its own
// (--faults' system calls about double plain's p99): compare its percentiles among runs of the same options.
struct Sample {
  std::uint32_t ns;
  std::uint8_t kind;    // Kind
  bool new_second;      // the first command of a market second (timers due)
  std::uint16_t trades;
  std::uint16_t events;
  std::uint16_t done;   // OrderDone events
  std::uint64_t allocated, deallocated;
  std::uint32_t minflt, csw;  // minor faults; voluntary + involuntary context switches
};

enum Kind : std::uint8_t { kBidRests, kBidTakes, kAskRests, kAskTakes, kCancelBid, kCancelAsk, kCancelOther, kOther, kKinds };
constexpr const char* kKindNames[kKinds] = {"place bid, rests", "place bid, trades", "place ask, rests",
                                            "place ask, trades", "cancel bid", "cancel ask", "cancel (gone)",
                                            "other"};

struct ThreadCounters {
  std::uint64_t* allocatedp = nullptr;
  std::uint64_t* deallocatedp = nullptr;
  ThreadCounters() {
    std::size_t size = sizeof allocatedp;
    mallctl("thread.allocatedp", &allocatedp, &size, nullptr, 0);
    size = sizeof deallocatedp;
    mallctl("thread.deallocatedp", &deallocatedp, &size, nullptr, 0);
  }
  std::uint64_t allocated() const { return allocatedp ? *allocatedp : 0; }
  std::uint64_t deallocated() const { return deallocatedp ? *deallocatedp : 0; }
};

void print_breakdown(const std::string& workload, std::vector<Sample> samples) {
  if (samples.empty()) return;
  std::vector<std::uint32_t> ns;
  ns.reserve(samples.size());
  for (const auto& s : samples) ns.push_back(s.ns);
  std::sort(ns.begin(), ns.end());
  const auto at = [&](double p) { return ns[std::min(ns.size() - 1, static_cast<std::size_t>(p * static_cast<double>(ns.size())))]; };
  const std::uint32_t t99 = at(0.99), t999 = at(0.999);
  std::size_t all99 = 0, all999 = 0;
  for (const auto& s : samples) {
    all99 += s.ns >= t99;
    all999 += s.ns >= t999;
  }
  std::fprintf(stderr, "%s --by-kind: %zu commands, p50 %.2f p99 %.2f p99.9 %.2f us\n", workload.c_str(), samples.size(),
               at(0.5) / 1000.0, t99 / 1000.0, t999 / 1000.0);
  // Per kind: its share of all commands, of the slowest 1 % and 0.1 %, and its own percentiles.
  std::fprintf(stderr, "  %-18s %8s %7s %7s %7s %8s %8s %8s %7s %7s\n", "kind", "count", "all%", ">=p99%", ">=p999%",
               "p50us", "p99us", "p999us", "trades", "events");
  for (int k = 0; k < kKinds; ++k) {
    std::vector<std::uint32_t> own;
    std::size_t n99 = 0, n999 = 0;
    double trades = 0, events = 0;
    for (const auto& s : samples) {
      if (s.kind != k) continue;
      own.push_back(s.ns);
      n99 += s.ns >= t99;
      n999 += s.ns >= t999;
      trades += s.trades;
      events += s.events;
    }
    if (own.empty()) continue;
    std::sort(own.begin(), own.end());
    const auto q = [&](double p) { return own[std::min(own.size() - 1, static_cast<std::size_t>(p * static_cast<double>(own.size())))] / 1000.0; };
    std::fprintf(stderr, "  %-18s %8zu %7.2f %7.2f %7.2f %8.2f %8.2f %8.2f %7.2f %7.2f\n", kKindNames[k], own.size(),
                 100.0 * static_cast<double>(own.size()) / static_cast<double>(samples.size()),
                 100.0 * static_cast<double>(n99) / static_cast<double>(all99),
                 100.0 * static_cast<double>(n999) / static_cast<double>(all999), q(0.5), q(0.99), q(0.999),
                 trades / static_cast<double>(own.size()), events / static_cast<double>(own.size()));
  }
  // What the slow ones did and met, against all commands.
  const auto profile = [&](const char* name, std::uint32_t floor) {
    std::size_t n = 0, new_second = 0, big_alloc = 0, any_alloc = 0, freed_big = 0, faults = 0, switched = 0;
    double trades = 0, events = 0, done = 0, bytes = 0;
    for (const auto& s : samples) {
      if (s.ns < floor) continue;
      ++n;
      new_second += s.new_second;
      any_alloc += s.allocated > 0;
      big_alloc += s.allocated >= 16384;
      freed_big += s.deallocated >= 16384;
      faults += s.minflt > 0;
      switched += s.csw > 0;
      trades += s.trades;
      events += s.events;
      done += s.done;
      bytes += static_cast<double>(s.allocated);
    }
    const auto pc = [&](std::size_t x) { return 100.0 * static_cast<double>(x) / static_cast<double>(n); };
    std::fprintf(stderr, "  %-6s n %7zu: new second %5.2f%%, allocated any %5.1f%% >=16KiB %5.2f%% (mean %.0f B), "
                 "freed >=16KiB %5.2f%%, page faults %5.2f%%, context switches %5.2f%% (--faults); trades %.2f, events %.2f, done %.2f\n",
                 name, n, pc(new_second), pc(any_alloc), pc(big_alloc), bytes / static_cast<double>(n), pc(freed_big),
                 pc(faults), pc(switched), trades / static_cast<double>(n), events / static_cast<double>(n),
                 done / static_cast<double>(n));
  };
  profile("all", 0);
  profile(">=p99", t99);
  profile(">=p999", t999);
  // The slowest 20, one line each.
  std::vector<std::size_t> idx(samples.size());
  for (std::size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::partial_sort(idx.begin(), idx.begin() + static_cast<std::ptrdiff_t>(std::min<std::size_t>(20, idx.size())), idx.end(),
                    [&](std::size_t a, std::size_t b) { return samples[a].ns > samples[b].ns; });
  for (std::size_t j = 0; j < std::min<std::size_t>(20, idx.size()); ++j) {
    const Sample& s = samples[idx[j]];
    std::fprintf(stderr, "  slow #%zu: command %zu, %.1f us, %s%s, trades %u, events %u, allocated %llu B, freed %llu B, "
                 "faults %u, switches %u\n", j + 1, idx[j], s.ns / 1000.0, kKindNames[s.kind], s.new_second ? ", new second" : "",
                 s.trades, s.events, static_cast<unsigned long long>(s.allocated), static_cast<unsigned long long>(s.deallocated),
                 s.minflt, s.csw);
  }
}

Kind kind_of(const CommandBody& body, const Resting& resting) {
  if (const auto* p = std::get_if<PlaceOrder>(&body)) return p->order.side == Side::buy ? kBidRests : kAskRests;
  if (const auto* c = std::get_if<Cancel>(&body)) {
    const auto v = static_cast<std::size_t>(c->order.value);
    const int side = v < resting.sides.size() ? resting.sides[v] : 0;
    return side == 1 + static_cast<int>(Side::buy) ? kCancelBid : side == 1 + static_cast<int>(Side::sell) ? kCancelAsk : kCancelOther;
  }
  return kOther;
}

rusage thread_usage() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u;
}

// Runs `next()` for `commands` commands (or until `max_seconds`), timing each apply.
template <class Next>
void measure(Driver& d, std::int64_t commands, double max_seconds, Next next, Result& r, std::vector<Sample>* by_kind,
             bool faults) {
  std::vector<std::uint32_t> ns;
  ns.reserve(static_cast<std::size_t>(commands));
  ThreadCounters counters;
  if (by_kind) by_kind->reserve(static_cast<std::size_t>(commands));
  const double cpu_started = thread_cpu_seconds();
  auto started = Clock::now();
  auto deadline = started + std::chrono::duration<double>(max_seconds);
  for (std::int64_t i = 0; i < commands; ++i) {
    if ((i & 1023) == 0 && Clock::now() > deadline) break;
    if (i % 1000 == 999) ++d.now;  // a thousand commands a second of market time
    auto [account, body] = next();
    if (by_kind) [[unlikely]] {
      Sample s{};
      s.kind = kind_of(body, d.resting);
      s.new_second = i % 1000 == 999;
      const rusage u0 = faults ? thread_usage() : rusage{};
      const std::uint64_t a0 = counters.allocated(), f0 = counters.deallocated();
      auto t0 = Clock::now();
      d.events.clear();
      d.engine.apply(Command{++d.seq, Seconds(d.now), account, std::move(body)}, d.events);
      auto t1 = Clock::now();
      s.allocated = counters.allocated() - a0;
      s.deallocated = counters.deallocated() - f0;
      const rusage u1 = faults ? thread_usage() : rusage{};
      s.minflt = static_cast<std::uint32_t>(u1.ru_minflt - u0.ru_minflt);
      s.csw = static_cast<std::uint32_t>(u1.ru_nvcsw - u0.ru_nvcsw + u1.ru_nivcsw - u0.ru_nivcsw);
      d.resting.track(d.events);
      s.ns = static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count());
      for (const auto& e : d.events) {
        s.trades += std::holds_alternative<TradeEvent>(e);
        s.done += std::holds_alternative<OrderDone>(e);
      }
      s.events = static_cast<std::uint16_t>(d.events.size());
      if (s.trades > 0 && (s.kind == kBidRests || s.kind == kAskRests)) s.kind = static_cast<std::uint8_t>(s.kind + 1);
      by_kind->push_back(s);
      ns.push_back(s.ns);
      continue;
    }
    auto t0 = Clock::now();
    d.events.clear();
    d.engine.apply(Command{++d.seq, Seconds(d.now), account, std::move(body)}, d.events);
    auto t1 = Clock::now();
    d.resting.track(d.events);
    ns.push_back(static_cast<std::uint32_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(t1 - t0).count()));
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  r.cpu_seconds = thread_cpu_seconds() - cpu_started;
  r.commands = static_cast<std::int64_t>(ns.size());
  r.p50_us = pct(ns, 0.5);
  r.p99_us = pct(ns, 0.99);
  r.p999_us = pct(ns, 0.999);
  r.resting = d.resting.ids.size();
  if (by_kind) print_breakdown(r.workload, *by_kind);
}

Result plain(std::int64_t commands, bool by_kind, bool faults) {
  Result r{"plain", "one market, one pool tier, spot bids and asks without constraints; ~70% places (1 in 7 crossing), ~30% cancels; 10,000 resting orders", 0, 0, 0, 0, 0, 0, 0, 0};
  EngineConfig config;
  config.markets = {MarketSpec{MarketId{"H100-SXM-80G"}, Price(100), 1000}};
  Limits unlimited{Qty(1'000'000'000), 1'000'000'000'000'000'000, 1'000'000'000};
  config.default_limits = unlimited;
  Driver d(config);
  d.resting.keep_sides = by_kind;
  PoolSpec spec;
  spec.market = MarketId{"H100-SXM-80G"};
  spec.region = "US";
  spec.gpus_per_node = 64;
  spec.nodes = 100'000;
  d.apply(AccountId(1), AddPool{spec});
  PoolId pool(d.seq);
  Rng rng{7};
  const std::int64_t mid = 2'000'000;
  auto place = [&](bool crossing) -> std::pair<AccountId, CommandBody> {
    OrderRequest o;
    o.quantity = Qty(rng.between(1, 10));
    if (rng.chance(50)) {
      o.side = Side::sell;
      o.pool = pool;
      o.price = Price(mid + (crossing ? -300 : rng.between(1, 200)) * 100);
      o.start = Seconds(d.now);
      o.end = Seconds(d.now + kDay);
      return {AccountId(1), PlaceOrder{std::move(o)}};
    }
    o.side = Side::buy;
    o.market = MarketId{"H100-SXM-80G"};
    o.price = Price(mid + (crossing ? 300 : -rng.between(1, 200)) * 100);
    o.duration = Seconds(3600);
    return {AccountId(rng.between(2, 101)), PlaceOrder{std::move(o)}};
  };
  d.resting.reserve(20'000, 1 << 19);
  auto before = heap_in_use();
  while (d.resting.ids.size() < 10'000) {
    auto [a, b] = place(false);
    d.apply(a, std::move(b));
  }
  r.bytes_per_resting_order = static_cast<double>(heap_in_use() - before) / static_cast<double>(d.resting.ids.size());
  std::vector<Sample> samples;
  measure(d, commands, 120, [&]() -> std::pair<AccountId, CommandBody> {
    if (rng.chance(30) && !d.resting.ids.empty()) {
      const std::size_t i = rng.next() % d.resting.ids.size();
      return {d.resting.accounts[i], Cancel{d.resting.ids[i]}};
    }
    return place(rng.between(0, 6) == 0);
  }, r, by_kind ? &samples : nullptr, faults);
  return r;
}

Result realistic(std::int64_t commands, bool by_kind, bool faults) {
  Result r{"realistic", "10 markets, 2,000 pools sampled from the real offers, forward windows up to 6 months, constrained bids, 100,000 resting orders; ~65% places (1 in 4 crossing), ~35% cancels", 0, 0, 0, 0, 0, 0, 0, 0};
  const std::string path = std::string(GPUEX_DATA_DIR) + "/vast-offers-2026-02-27_2026-03-06.csv";
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  auto offers = parse_offers(ss.str(), 42);
  if (offers.empty()) {  // the checkout it was built in moved or went: say so, not a division by zero below
    std::fprintf(stderr, "bench_matching: no offers read from %s\n", path.c_str());
    std::exit(1);
  }
  EngineConfig config;
  for (const auto& m : offer_markets()) config.markets.push_back(MarketSpec{m, Price(100), 1000});
  config.default_limits = Limits{Qty(1'000'000'000), 1'000'000'000'000'000'000, 1'000'000'000};
  Driver d(config);
  d.resting.keep_sides = by_kind;
  Rng rng{11};
  // Reference price per market: the median offer price.
  std::map<MarketId, std::vector<std::int64_t>> prices;
  for (const auto& o : offers) prices[o.pool.market].push_back(o.price.value);
  std::map<MarketId, std::int64_t> ref;
  for (auto& [m, v] : prices) {
    std::sort(v.begin(), v.end());
    ref[m] = v[v.size() / 2];
  }
  struct P {
    PoolId id;
    AccountId provider;
    std::int64_t price;
    std::int32_t gpus_per_node;
  };
  std::vector<P> pools;
  for (int i = 0; i < 2000; ++i) {
    const Offer& o = offers[rng.next() % offers.size()];
    PoolSpec spec = o.pool;
    spec.nodes = 32;  // a pool of 32 machines like the offer's
    AccountId provider(1000 + o.machine % 300);
    d.apply(provider, AddPool{spec});
    pools.push_back({PoolId(d.seq), provider, o.price.value, spec.gpus_per_node});
  }
  const std::vector<std::string> regions = {"US", "DE", "FR", "GB", "CA", "NL", "SE", "JP", "PL", "ES"};
  auto round_tick = [](std::int64_t v) { return std::max<std::int64_t>(100, v / 100 * 100); };
  auto place = [&](bool crossing) -> std::pair<AccountId, CommandBody> {
    OrderRequest o;
    if (rng.chance(50)) {
      const P& p = pools[rng.next() % pools.size()];
      o.side = Side::sell;
      o.pool = p.id;
      o.quantity = Qty(rng.between(1, p.gpus_per_node));
      o.price = Price(round_tick(p.price * (crossing ? 60 : rng.between(100, 130)) / 100));
      std::int64_t start = d.now + (rng.chance(40) ? 0 : rng.between(1, 90) * kDay);
      o.start = Seconds(start);
      o.end = Seconds(std::min(start + rng.between(1, 90) * kDay, d.now + 180 * kDay));
      if (rng.chance(30)) o.min_duration = Seconds(3600);
      return {p.provider, PlaceOrder{std::move(o)}};
    }
    auto market = config.markets[rng.next() % config.markets.size()].id;
    o.side = Side::buy;
    o.market = market;
    o.quantity = Qty(rng.between(1, 8));
    o.price = Price(round_tick(ref[market] * (crossing ? 150 : rng.between(70, 99)) / 100));
    if (rng.chance(40)) {
      o.duration = Seconds(rng.between(1, 72) * 3600);
    } else {
      std::int64_t start = d.now + rng.between(1, 150) * kDay;
      o.start = Seconds(start);
      o.end = Seconds(start + rng.between(1, 30) * kDay);
    }
    auto& c = o.constraints;
    if (rng.chance(30)) {
      for (int k = static_cast<int>(rng.between(1, 3)); k > 0; --k) c.regions.push_back(regions[rng.next() % regions.size()]);
      std::sort(c.regions.begin(), c.regions.end());
      c.regions.erase(std::unique(c.regions.begin(), c.regions.end()), c.regions.end());
    }
    if (rng.chance(20)) c.tiers = {Tier::bare_metal};
    if (rng.chance(10)) c.min_fabric = Fabric::roce;
    if (rng.chance(10)) c.nvlink = true;
    if (rng.chance(10)) c.min_sla_pct_x1000 = 99'000;
    if (rng.chance(10)) c.interruptible = true;
    return {AccountId(rng.between(2, 501)), PlaceOrder{std::move(o)}};
  };
  d.resting.reserve(200'000, 1 << 21);
  auto before = heap_in_use();
  std::int64_t guard = 0;
  while (d.resting.ids.size() < 100'000 && ++guard < 1'000'000) {
    auto [a, b] = place(false);
    d.apply(a, std::move(b));
  }
  r.bytes_per_resting_order = static_cast<double>(heap_in_use() - before) / static_cast<double>(d.resting.ids.size());
  std::vector<Sample> samples;
  measure(d, commands, 120, [&]() -> std::pair<AccountId, CommandBody> {
    if (rng.chance(35) && !d.resting.ids.empty()) {
      const std::size_t i = rng.next() % d.resting.ids.size();
      return {d.resting.accounts[i], Cancel{d.resting.ids[i]}};
    }
    return place(rng.between(0, 3) == 0);
  }, r, by_kind ? &samples : nullptr, faults);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bool json = false;
  bool by_kind = false;
  bool faults = false;
  std::int64_t commands = 1'000'000;
  std::size_t heap_mib = gpuex::alloc::kDefaultEngineHeapMiB;
  std::vector<std::string> only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--json") json = true;
    else if (a == "--by-kind") by_kind = true;
    else if (a == "--faults") faults = true;
    else if (a == "--commands" && i + 1 < argc) commands = std::stoll(argv[++i]);
    else if (a == "--engine-heap-mib" && i + 1 < argc) heap_mib = std::stoull(argv[++i]);
    else if (a == "plain" || a == "realistic") only.push_back(a);
    else {
      std::fprintf(stderr, "usage: bench_matching [plain|realistic] [--commands N] [--engine-heap-mib N] [--json] "
                           "[--by-kind] [--faults]\n");
      return 2;
    }
  }
  auto wanted = [&](const std::string& w) { return only.empty() || std::find(only.begin(), only.end(), w) != only.end(); };
  // As gpuexd runs the engine: on its own arena, faulted in before the first command (--engine-heap-mib).
  const gpuex::alloc::EngineHeap heap(heap_mib << 20);
  const gpuex::alloc::HeapBinding bound(&heap);
  std::vector<Result> results;
  if (wanted("plain")) results.push_back(plain(commands, by_kind || faults, faults));
  if (wanted("realistic")) results.push_back(realistic(commands, by_kind || faults, faults));
  for (const auto& r : results) {
    double rate = r.seconds > 0 ? static_cast<double>(r.commands) / r.seconds : 0;
    double cpu_rate = r.cpu_seconds > 0 ? static_cast<double>(r.commands) / r.cpu_seconds : 0;
    if (json) {
      std::printf("{\"workload\":\"%s\",\"commands_per_s\":%.0f,\"p50_us\":%.3f,\"p99_us\":%.3f,\"p999_us\":%.3f,"
                  "\"bytes_per_resting_order\":%.0f,\"commands\":%lld,\"resting_orders\":%zu,"
                  "\"cpu_s\":%.3f,\"commands_per_cpu_s\":%.0f,\"engine_heap_mib\":%zu}\n",
                  r.workload.c_str(), rate, r.p50_us, r.p99_us, r.p999_us, r.bytes_per_resting_order,
                  static_cast<long long>(r.commands), r.resting, r.cpu_seconds, cpu_rate, heap.reserve_bytes() >> 20);
    } else {
      std::printf("%s: %s\n", r.workload.c_str(), r.description.c_str());
      std::printf("  %lld commands in %.2f s: %.0f commands/s\n", static_cast<long long>(r.commands), r.seconds, rate);
      std::printf("  CPU time of this thread: %.2f s: %.0f commands per CPU-second (wall figures also count time the OS gave other processes)\n",
                  r.cpu_seconds, cpu_rate);
      std::printf("  latency per command: p50 %.2f us, p99 %.2f us, p99.9 %.2f us\n", r.p50_us, r.p99_us, r.p999_us);
      std::printf("  memory: %.0f bytes per resting order (heap growth while the book filled, jemalloc's allocated bytes; "
                  "allocator as gpuexd's: jemalloc, %s); %zu resting at the end\n",
                  r.bytes_per_resting_order, malloc_conf, r.resting);
      std::printf("  engine heap (gpuexd's --engine-heap-mib, here --engine-heap-mib): %s\n", heap.describe().c_str());
    }
  }
  return 0;
}
