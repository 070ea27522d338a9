// See snapshot_codec.hpp. Pool specs, order requests and the green policy reuse the command log's
// forms (which reuse the API's), so a snapshot and the log cannot read the same value differently.
#include "server/store/snapshots.hpp"

#include <spdlog/fmt/fmt.h>

#include <boost/json.hpp>

#include "server/store/command_codec.hpp"
#include "server/store/json_read.hpp"
#include "server/wire.hpp"

namespace gpuex::store {

using namespace matching;
namespace json = boost::json;

namespace {

constexpr std::string_view kWhat = "engine snapshot";

std::int64_t i64(const json::object& o, std::string_view key) { return int_at(o, key, kWhat); }
std::int32_t i32(const json::object& o, std::string_view key) { return static_cast<std::int32_t>(i64(o, key)); }
Seconds secs(const json::object& o, std::string_view key) { return Seconds(i64(o, key)); }
bool flag(const json::object& o, std::string_view key) { return bool_at(o, key, kWhat); }
std::string text(const json::object& o, std::string_view key) { return string_at(o, key, kWhat); }
const json::object& object(const json::value& v) {
  if (!v.is_object()) throw StoreError("engine snapshot: an element is not an object");
  return v.get_object();
}
template <class E>
E enum_at(const json::object& o, std::string_view key, E last) {
  auto v = i64(o, key);
  if (v < 0 || v > static_cast<std::int64_t>(last)) throw StoreError("engine snapshot: '" + std::string(key) + "' is out of range");
  return static_cast<E>(v);
}
// Optional times are null when unset.
json::value opt(const std::optional<Seconds>& t) { return t ? json::value(t->value) : json::value(nullptr); }
std::optional<Seconds> opt_secs(const json::object& o, std::string_view key) {
  if (member(o, key, kWhat).is_null()) return std::nullopt;
  return secs(o, key);
}

// A 64-bit hash, written as a decimal string: JSON numbers lose 64-bit values.
std::uint64_t hash_at(const json::object& o, std::string_view key) {
  const std::string hash = text(o, key);
  std::size_t used = 0;
  std::uint64_t value = 0;
  try {
    value = std::stoull(hash, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != hash.size() || hash.front() == '-')
    throw StoreError("engine snapshot: '" + std::string(key) + "' is not a decimal number");
  return value;
}

json::object pool_json(const Pool& p) {
  return {{"id", p.id.value},
          {"provider", p.provider.value},
          {"spec", wire::pool_spec_body(p.spec)},
          {"verified", p.verified},
          {"verified_until", p.verified_until.value},
          {"evidence", p.evidence},
          {"green_tier", static_cast<int>(p.green_tier)},
          {"green_discount_bps", p.green_discount_bps},
          {"retired", p.retired},
          {"created_at", p.created_at.value},
          {"updated_at", p.updated_at.value}};
}

Pool read_pool(const json::object& o) {
  Pool p;
  p.id = PoolId(i64(o, "id"));
  p.provider = AccountId(i64(o, "provider"));
  p.spec = read_with<PoolSpec>(object_at(o, "spec", kWhat), wire::read_pool_spec, kWhat);
  p.verified = flag(o, "verified");
  p.verified_until = secs(o, "verified_until");
  p.evidence = text(o, "evidence");
  p.green_tier = enum_at(o, "green_tier", GreenTier::green_plus);
  p.green_discount_bps = i32(o, "green_discount_bps");
  p.retired = flag(o, "retired");
  p.created_at = secs(o, "created_at");
  p.updated_at = secs(o, "updated_at");
  return p;
}

json::object order_json(const Order& o) {
  json::array free;
  for (const Step& s : o.free.pieces()) free.push_back(json::array{s.from.value, s.to.value, s.gpus});
  return {{"id", o.id.value},
          {"account", o.account.value},
          {"request", wire::order_request_body(o.request)},
          {"market", o.market.value()},
          {"window_start", o.window_start.value},
          {"window_end", o.window_end.value},
          {"effective_price", o.effective_price.value},
          {"green_discount_bps", o.green_discount_bps},
          {"status", static_cast<int>(o.status)},
          {"reason", static_cast<int>(o.reason)},
          {"bucket", o.bucket.yyyymm},
          {"priority", o.priority},
          {"created_at", o.created_at.value},
          {"updated_at", o.updated_at.value},
          {"filled", o.filled.value},
          {"remaining", o.remaining.value},
          {"total_gpu_seconds", o.total_gpu_seconds},
          {"filled_gpu_seconds", o.filled_gpu_seconds},
          {"lapsed_gpu_seconds", o.lapsed_gpu_seconds},
          {"free_gpu_seconds", o.free_gpu_seconds},
          {"cancelled_gpu_seconds", o.cancelled_gpu_seconds},
          {"free", std::move(free)},
          {"body_hash", std::to_string(o.body_hash)}};
}

Order read_order(const json::object& j) {
  Order o;
  o.id = OrderId(i64(j, "id"));
  o.account = AccountId(i64(j, "account"));
  o.request = read_with<OrderRequest>(object_at(j, "request", kWhat), wire::read_order_request, kWhat);
  o.market = MarketId{text(j, "market")};
  o.window_start = secs(j, "window_start");
  o.window_end = secs(j, "window_end");
  o.effective_price = Price(i64(j, "effective_price"));
  o.green_discount_bps = i32(j, "green_discount_bps");
  o.status = enum_at(j, "status", OrderStatus::rejected);
  o.reason = enum_at(j, "reason", Reason::lease_not_open);
  o.bucket = Bucket{i32(j, "bucket")};
  o.priority = i64(j, "priority");
  o.created_at = secs(j, "created_at");
  o.updated_at = secs(j, "updated_at");
  o.filled = Qty(i64(j, "filled"));
  o.remaining = Qty(i64(j, "remaining"));
  o.total_gpu_seconds = i64(j, "total_gpu_seconds");
  o.filled_gpu_seconds = i64(j, "filled_gpu_seconds");
  o.lapsed_gpu_seconds = i64(j, "lapsed_gpu_seconds");
  o.free_gpu_seconds = i64(j, "free_gpu_seconds");
  o.cancelled_gpu_seconds = i64(j, "cancelled_gpu_seconds");
  for (const auto& piece : array_at(j, "free", kWhat)) {
    const auto* a = piece.if_array();
    if (!a || a->size() != 3 || !(*a)[0].is_int64() || !(*a)[1].is_int64() || !(*a)[2].is_int64())
      throw StoreError("engine snapshot: a piece of an order's free capacity is not [from, to, gpus]");
    o.free.add(Seconds((*a)[0].get_int64()), Seconds((*a)[1].get_int64()), (*a)[2].get_int64());
  }
  o.body_hash = hash_at(j, "body_hash");
  return o;
}

json::object lease_json(const Lease& l) {
  return {{"id", l.id.value},
          {"trade", l.trade.value},
          {"split_from", l.split_from.value},
          {"buyer", l.buyer.value},
          {"provider", l.provider.value},
          {"pool", l.pool.value},
          {"market", l.market.value()},
          {"buy_order", l.buy_order.value},
          {"sell_order", l.sell_order.value},
          {"quantity", l.quantity.value},
          {"start", l.start.value},
          {"end", l.end.value},
          {"price", l.price.value},
          {"list_price", l.list_price.value},
          {"green_discount_bps", l.green_discount_bps},
          {"interruptible", l.interruptible},
          {"status", static_cast<int>(l.status)},
          {"preempted_at", opt(l.preempted_at)},
          {"ends_at", opt(l.ends_at)},
          {"billed", l.billed},
          {"owed", l.owed},
          {"bucket", l.bucket.yyyymm},
          {"ended", l.ended},
          {"ask_window_start", l.ask_window_start.value},
          {"ask_window_end", l.ask_window_end.value},
          {"ask_list_price", l.ask_list_price.value},
          {"ask_min_chunk", l.ask_min_chunk.value},
          {"ask_min_duration", l.ask_min_duration.value},
          {"ask_withdrawn", l.ask_withdrawn}};
}

Lease read_lease(const json::object& j) {
  Lease l;
  l.id = LeaseId(i64(j, "id"));
  l.trade = TradeId(i64(j, "trade"));
  l.split_from = LeaseId(i64(j, "split_from"));
  l.buyer = AccountId(i64(j, "buyer"));
  l.provider = AccountId(i64(j, "provider"));
  l.pool = PoolId(i64(j, "pool"));
  l.market = MarketId{text(j, "market")};
  l.buy_order = OrderId(i64(j, "buy_order"));
  l.sell_order = OrderId(i64(j, "sell_order"));
  l.quantity = Qty(i64(j, "quantity"));
  l.start = secs(j, "start");
  l.end = secs(j, "end");
  l.price = Price(i64(j, "price"));
  l.list_price = Price(i64(j, "list_price"));
  l.green_discount_bps = i32(j, "green_discount_bps");
  l.interruptible = flag(j, "interruptible");
  l.status = enum_at(j, "status", LeaseStatus::released);
  l.preempted_at = opt_secs(j, "preempted_at");
  l.ends_at = opt_secs(j, "ends_at");
  l.billed = i64(j, "billed");
  l.owed = i64(j, "owed");
  l.bucket = Bucket{i32(j, "bucket")};
  l.ended = flag(j, "ended");
  l.ask_window_start = secs(j, "ask_window_start");
  l.ask_window_end = secs(j, "ask_window_end");
  l.ask_list_price = Price(i64(j, "ask_list_price"));
  l.ask_min_chunk = Qty(i64(j, "ask_min_chunk"));
  l.ask_min_duration = secs(j, "ask_min_duration");
  l.ask_withdrawn = flag(j, "ask_withdrawn");
  return l;
}

template <class T, class Write>
json::array array_of(const std::vector<T>& items, Write write) {
  json::array a;
  a.reserve(items.size());
  for (const T& item : items) a.push_back(write(item));
  return a;
}

template <class T, class Read>
std::vector<T> read_array(const json::object& o, std::string_view key, Read read) {
  std::vector<T> items;
  const auto& a = array_at(o, key, kWhat);
  items.reserve(a.size());
  for (const auto& v : a) items.push_back(read(object(v)));
  return items;
}

}  // namespace

std::string snapshot_json(const EngineState& s) {
  json::object o{
      {"format", kSnapshotFormat},
      {"last_seq", s.last_seq},
      {"now", s.now.value},
      {"next_trade_id", s.next_trade_id},
      {"next_lease_id", s.next_lease_id},
      {"policy", command_body_json(SetGreenPolicy{s.policy})},
      {"pools", array_of(s.pools, pool_json)},
      {"open_orders", array_of(s.open_orders, order_json)},
      {"leases", array_of(s.leases, lease_json)},
      {"limits", array_of(s.limits,
                          [](const std::pair<AccountId, Limits>& l) {
                            return command_body_json(SetLimits{l.first, l.second});
                          })},
      {"halted_markets", array_of(s.halted_markets, [](const MarketId& m) { return json::value(m.value()); })},
      {"view_sequences", array_of(s.view_sequences, [](const ViewSequence& v) {
         return json::object{{"market", v.market.value()}, {"bucket", v.bucket.yyyymm}, {"sequence", v.sequence}};
       })},
      {"finished", array_of(s.finished, [](const FinishedOrder& f) {
         return json::object{{"order", order_json(f.order)},
                             {"body_hash", std::to_string(f.body_hash)},
                             {"done_seq", f.done_seq}};
       })}};
  return json::serialize(o);
}

EngineState snapshot_from_json(std::string_view text_in) {
  boost::system::error_code ec;
  auto parsed = json::parse(text_in, ec);
  if (ec || !parsed.is_object()) throw StoreError("engine snapshot: not a JSON object");
  const auto& o = parsed.get_object();
  if (i64(o, "format") != kSnapshotFormat) throw StoreError("engine snapshot: format " + std::to_string(i64(o, "format")) +
                                                            " is not " + std::to_string(kSnapshotFormat));
  EngineState s;
  s.last_seq = i64(o, "last_seq");
  s.now = secs(o, "now");
  s.next_trade_id = i64(o, "next_trade_id");
  s.next_lease_id = i64(o, "next_lease_id");
  s.policy = std::get<SetGreenPolicy>(command_body_from_json("set_green_policy", object_at(o, "policy", kWhat))).policy;
  s.pools = read_array<Pool>(o, "pools", read_pool);
  s.open_orders = read_array<Order>(o, "open_orders", read_order);
  s.leases = read_array<Lease>(o, "leases", read_lease);
  for (const auto& v : array_at(o, "limits", kWhat)) {
    auto c = std::get<SetLimits>(command_body_from_json("set_limits", object(v)));
    s.limits.emplace_back(c.account, c.limits);
  }
  for (const auto& v : array_at(o, "halted_markets", kWhat)) {
    if (!v.is_string()) throw StoreError("engine snapshot: a halted market is not a string");
    s.halted_markets.push_back(MarketId{std::string(v.get_string())});
  }
  for (const auto& v : array_at(o, "view_sequences", kWhat)) {
    const auto& j = object(v);
    s.view_sequences.push_back(ViewSequence{MarketId{text(j, "market")}, Bucket{i32(j, "bucket")},
                                            static_cast<std::uint64_t>(i64(j, "sequence"))});
  }
  for (const auto& v : array_at(o, "finished", kWhat)) {
    const auto& j = object(v);
    s.finished.push_back(FinishedOrder{read_order(object_at(j, "order", kWhat)), hash_at(j, "body_hash"), i64(j, "done_seq")});
  }
  return s;
}

void save_snapshot(PgConnection& db, const EngineState& state, std::uint64_t digest, int keep) {
  const std::string text = snapshot_json(state);
  db.exec_script("BEGIN");
  try {
    db.exec("INSERT INTO engine_snapshots (seq, format, digest, orders, state) VALUES ($1, $2, $3, $4, $5) "
            "ON CONFLICT (seq) DO NOTHING",
            {std::to_string(state.last_seq), std::to_string(kSnapshotFormat), fmt::format("{:016x}", digest),
             std::to_string(state.open_orders.size()), text});
    db.exec("DELETE FROM engine_snapshots WHERE seq NOT IN (SELECT seq FROM engine_snapshots ORDER BY seq DESC LIMIT $1)",
            {std::to_string(keep)});
    db.exec_script("COMMIT");
  } catch (...) {
    if (db.healthy()) db.exec_script("ROLLBACK");
    throw;
  }
}

std::vector<StoredSnapshot> list_snapshots(PgConnection& db) {
  auto rows = db.exec("SELECT seq, format, digest FROM engine_snapshots ORDER BY seq DESC");
  std::vector<StoredSnapshot> out;
  for (int i = 0; i < rows.rows(); ++i) {
    out.push_back(StoredSnapshot{rows.integer(i, 0), static_cast<int>(rows.integer(i, 1)), std::string(rows.text(i, 2))});
  }
  return out;
}

PgResult snapshot_state(PgConnection& db, Seq seq) {
  auto rows = db.exec("SELECT state FROM engine_snapshots WHERE seq = $1", {std::to_string(seq)});
  if (rows.rows() != 1) throw StoreError("engine snapshot of seq " + std::to_string(seq) + " is gone");
  return rows;
}

}  // namespace gpuex::store
