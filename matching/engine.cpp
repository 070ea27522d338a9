// The matching engine: state, the time step, matching walks, and one handler per command.
#include "matching/engine.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <deque>
#include <memory>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <stdexcept>
#include <tuple>
#include <unordered_map>
#include <type_traits>
#include <utility>

#include "matching/chunked_set.hpp"
#include "matching/digest.hpp"
#include "matching/level_set.hpp"
#include "matching/money.hpp"
#include "matching/size_class.hpp"
#include "matching/step_tree.hpp"
#include "matching/timer_heap.hpp"

namespace gpuex::matching {
namespace {

constexpr Seconds kForever{std::numeric_limits<std::int64_t>::max() / 4};

// The largest quantity an order may have (validate; quote() quotes nothing above it). A lot (min_chunk)
// divides the quantity, so an open order's quantity and min_chunk both fit a Qty32.
constexpr std::int64_t kMaxQuantity = 100'000'000;

// A quantity of 0 to kMaxQuantity GPUs in 32 bits (two in an order: 8 bytes less per order), made only from a
// Qty in those bounds and read as a Qty.
struct Qty32 {
  std::int32_t value{0};
  Qty32() = default;
  explicit Qty32(Qty q) : value(static_cast<std::int32_t>(q.value)) {}
  operator Qty() const { return Qty(value); }  // NOLINT(google-explicit-constructor): read as what it is
  static bool holds(Qty q) { return q.value >= 0 && q.value <= kMaxQuantity; }
  bool operator==(const Qty32&) const = default;
};
static_assert(kMaxQuantity <= std::numeric_limits<std::int32_t>::max());

// The most GPUs a pool may have (gpus_per_node x nodes; AddPool and ResizePool refuse more, gpuexd's own bounds are
// far below). A pool's commitments (LivePool::used) then lie in 0..kMaxPoolGpus, give or take one change of at most
// kMaxQuantity on its way in, and StepTree keeps them, and any difference of two, in 32 bits.
constexpr std::int64_t kMaxPoolGpus = 1'000'000'000;
static_assert(kMaxPoolGpus + 2 * kMaxQuantity <= std::numeric_limits<std::int32_t>::max());

struct LiveOrder;
struct LivePool;
struct Account;

// Ordered and compared by (effective, priority, id) only. `lo` / `pool` are lookup shortcuts set when the
// key is put into a book (the order's node in Impl::orders and its pool's in Impl::pools; both maps keep
// element addresses stable, and an order leaves the books before it leaves the map); null elsewhere.
//
// `start`, `end`, `min_duration` copy the ask's window_start, window_end and min_duration (fixed while it
// rests) so that a walk rejects asks whose window cannot hold a bid without touching the order. The `run_*`
// fields summarize its free capacity (set each time it enters a book; a fill or an amend takes it out
// first): a bid can take from it only over a window inside one run of time where at least one lot
// (min_chunk) is free, so a window must lie in [start + run_lead, end - run_tail) (the hull of those runs)
// and be no longer than max_run (the longest run; kAnyRun when it does not fit in 32 bits).
constexpr std::int32_t kAnyRun = std::numeric_limits<std::int32_t>::max();

struct AskKey {
  Price effective;
  Seq priority{0};
  OrderId id;
  LiveOrder* lo{nullptr};
  const LivePool* pool{nullptr};
  Seconds start{};
  Seconds end{};
  Seconds min_duration{};
  std::int32_t run_lead{0};
  std::int32_t run_tail{0};
  std::int32_t max_run{kAnyRun};
  Seconds run_start() const { return start + Seconds(run_lead); }
  Seconds run_end() const { return end - Seconds(run_tail); }
  bool operator==(const AskKey& o) const {
    return effective == o.effective && priority == o.priority && id == o.id;
  }
  // Spelled out (not synthesized from <=>): the book sets compare keys on every insert, erase and seek.
  bool operator<(const AskKey& o) const {
    if (effective.value != o.effective.value) return effective.value < o.effective.value;
    if (priority != o.priority) return priority < o.priority;
    return id.value < o.id.value;
  }
  auto operator<=>(const AskKey& o) const {
    if (auto c = effective <=> o.effective; c != 0) return c;
    if (auto c = priority <=> o.priority; c != 0) return c;
    return id <=> o.id;
  }
};

// Ordered (BidOrder) and compared by (price, priority, id) only; `lo` as for AskKey. `start`/`end` copy a
// fixed-window bid's window, `duration` a duration bid's (both fixed while it rests), for the same reason.
struct BidKey {
  Price price;
  Seq priority{0};
  OrderId id;
  LiveOrder* lo{nullptr};
  Seconds start{};
  Seconds end{};
  Seconds duration{};
  bool operator==(const BidKey& o) const { return price == o.price && priority == o.priority && id == o.id; }
  // The window the bid takes if served at `now`: a fixed-window bid's own, a duration bid's from now.
  Seconds start_at(Seconds now) const { return duration.value == 0 ? start : now; }
  Seconds end_at(Seconds now) const { return duration.value == 0 ? end : now + duration; }
};

// Bids: price descending, then arrival. `level`: a BidSet's price levels (LevelSet), the highest price first.
struct BidOrder {
  bool operator()(const BidKey& a, const BidKey& b) const { return a.price != b.price ? a.price > b.price : in_level(a, b); }
  static std::int64_t level(const BidKey& k) { return ~k.price.value; }  // ~: order-reversing, no overflow
  // The order of two bids of one level (one price): the price compare left out.
  static bool in_level(const BidKey& a, const BidKey& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.id < b.id;
  }
};

// Asks: AskKey's own order; `level`: an AskSet's price levels (LevelSet), by effective price.
struct AskOrder {
  bool operator()(const AskKey& a, const AskKey& b) const { return a < b; }
  static std::int64_t level(const AskKey& k) { return k.effective.value; }
  // The order of two asks of one level (one effective price): the price compare left out.
  static bool in_level(const AskKey& a, const AskKey& b) {
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.id.value < b.id.value;
  }
};

struct ViewKey {
  MarketId market;
  Bucket bucket;
  auto operator<=>(const ViewKey&) const = default;
};

// What one resting order contributes to one book view: the view of its market (which never changes) and
// `bucket`.
struct Shown {
  Price price;
  Qty32 qty;  // a bid's remaining GPUs or an ask's free ones: at most its quantity
  Bucket bucket;
  bool shown{false};
  bool constrained{false};
  Side side{Side::buy};
  bool operator==(const Shown&) const = default;
};

// What an order keeps of its Shown (what its view has of it), LiveOrder::shown: the GPUs shown, or -1 when it is
// not shown; the rest is the order's own. Its side never changes, nor does whether it is counted apart as
// constrained (Impl::shown_constrained); its bucket is the order's `bucket` until refresh_view moves it (a month
// turning spot; placement and restore set it before the order is first shown); its price is the order's shown price
// (Impl::shown_price), because an amend or a re-pricing that changes that price while the order is shown takes its
// contribution off first (Impl::hide_view). 20 bytes less per order than a whole Shown.
struct ShownMark {
  std::int32_t qty{-1};
  ShownMark() = default;
  explicit ShownMark(const Shown& s) : qty(s.shown ? s.qty.value : -1) {}
  bool operator==(const ShownMark&) const = default;
  bool shown() const { return qty >= 0; }
  // The whole Shown, given what the order gives.
  Shown as_of(Price price, Bucket bucket, Side side, bool constrained) const {
    return Shown{price, Qty32(Qty(shown() ? qty : 0)), bucket, shown(), constrained, side};
  }
};

// The compact form of an open order's OrderRequest: the fields the engine reads while the order lives
// inline; the optional times as values with a presence mask; the constraints interned (shared by every
// order with equal constraints; null = none); the rarely set client_order_id and a request market that
// differs from the resolved one, a gtd order's expire_at and the body hash (non-zero only with a
// client_order_id, or as restored) in a side object (null when none is set), with what does not fit the order's
// compact fields (a start other than its window_start; a duration, an updated_at, a window_end or a priority that
// the 32-bit fields do not hold).
// Impl::to_order rebuilds the OrderRequest exactly.
struct RestCold {
  std::string client_order_id;
  MarketId request_market;
  Seconds expire_at;
  Seconds duration;    // only when it does not fit RestRequest::duration_v (kColdDuration)
  Seconds start;       // only when it is not the order's window_start (kColdStart; see Impl::make_order)
  Seconds end;         // only when it is not the order's window_end (kColdEnd; see Impl::make_order)
  Seconds updated_at;  // only when RestOrder::updated_after cannot hold it (kWide)
  Seconds window_end;  // only when RestOrder::window_length cannot hold it (kWide)
  Seq priority{0};     // only when RestOrder::priority_lag cannot hold it (kWide)
  std::uint64_t body_hash{0};
  PoolId pool;       // a buy's, if it named one (it is ignored, and echoed); a sell's is its AskSide's
};

// A record an order owns alone (8 bytes, not a shared_ptr's 16): a copy of the order copies it; null when
// there is none.
template <class T>
class Owned {
 public:
  Owned() = default;
  explicit Owned(std::unique_ptr<T> p) : p_(std::move(p)) {}
  Owned(const Owned& o) : p_(o.p_ ? std::make_unique<T>(*o.p_) : nullptr) {}
  Owned& operator=(const Owned& o) {
    if (this != &o) p_ = o.p_ ? std::make_unique<T>(*o.p_) : nullptr;
    return *this;
  }
  Owned(Owned&&) noexcept = default;
  Owned& operator=(Owned&&) noexcept = default;
  ~Owned() = default;
  const T* operator->() const { return p_.get(); }
  T* operator->() { return p_.get(); }
  const T& operator*() const { return *p_; }
  T& operator*() { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  std::unique_ptr<T> p_;
};

// An order's RestCold: rare (most orders have none) and never changed once made (RestOrder::set_wide replaces it
// with a changed copy, in the rare case it needs one).
using ColdRef = Owned<const RestCold>;

// The leases an ask created, in one allocation: a word of count and capacity, then the ids, the capacity
// 2^k - 1 so that the block is a power of two (16 bytes for one lease, where a std::vector behind a pointer took
// a 32-byte vector and an 8-byte buffer). Copies copy the ids (an ask's trial copies).
class LeaseIds {
 public:
  LeaseIds() = default;
  LeaseIds(const LeaseIds& o) { assign(o); }
  LeaseIds& operator=(const LeaseIds& o) {
    if (this != &o) {
      release();
      assign(o);
    }
    return *this;
  }
  LeaseIds(LeaseIds&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  LeaseIds& operator=(LeaseIds&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  ~LeaseIds() { release(); }

  std::uint32_t size() const { return p_ ? static_cast<std::uint32_t>(p_[0]) : 0; }
  const LeaseId* begin() const { return p_ ? ids() : nullptr; }
  const LeaseId* end() const { return p_ ? ids() + size() : nullptr; }
  void clear() {
    if (p_) p_[0] = pack(0, capacity());
  }
  void push_back(LeaseId id) {
    const std::uint32_t n = size();
    if (n == capacity()) grow(2 * n + 1);
    ids()[n] = id;
    p_[0] = pack(n + 1, capacity());
  }

 private:
  static_assert(sizeof(LeaseId) == sizeof(std::uint64_t) && std::is_trivially_copyable_v<LeaseId>);
  static std::uint64_t pack(std::uint32_t n, std::uint32_t cap) { return std::uint64_t{cap} << 32 | n; }
  std::uint32_t capacity() const { return p_ ? static_cast<std::uint32_t>(p_[0] >> 32) : 0; }
  LeaseId* ids() const { return reinterpret_cast<LeaseId*>(p_ + 1); }
  void grow(std::uint32_t cap) {
    auto* q = static_cast<std::uint64_t*>(::operator new(sizeof(std::uint64_t) * (cap + 1)));
    const std::uint32_t n = size();
    if (p_) std::memcpy(q + 1, p_ + 1, sizeof(std::uint64_t) * n);
    release();
    p_ = q;
    p_[0] = pack(n, cap);
  }
  void assign(const LeaseIds& o) {
    if (!o.p_ || o.size() == 0) return;
    grow(o.capacity());
    std::memcpy(p_ + 1, o.p_ + 1, sizeof(std::uint64_t) * o.size());
    p_[0] = pack(o.size(), capacity());
  }
  void release() {
    if (p_) ::operator delete(p_, sizeof(std::uint64_t) * (capacity() + 1));
    p_ = nullptr;
  }
  std::uint64_t* p_{nullptr};
};

// What only an ask keeps (Order's fields, which a bid has only when it sent a min_duration or a snapshot gave
// it others, and the engine's own ask-only fields), apart from the order: an 80-byte record per ask (56 % of a realistic book),
// so that an order's slot is 144 bytes (LiveOrder).
struct AskSide {
  Steps free;  // its free capacity
  std::int64_t total_gpu_seconds{0};
  std::int64_t lapsed_gpu_seconds{0};
  std::int64_t cancelled_gpu_seconds{0};
  LeaseIds sold;  // leases it created (some may have ended)
  // Its pool, set with the record (a sell's pool never changes, and Impl::pools, a std::map, never erases a
  // pool), so a sell's pool is never looked up by id; its id is the order's request_pool(). Null in a bid's.
  LivePool* pool{nullptr};
  std::uint32_t pool_slot{0};  // its place in its LivePool's asks
  std::int32_t green_discount_bps{0};
  // The order's effective price and its request's min_duration (RestOrder::effective_price(), min_duration()),
  // which a bid does not keep: a bid's are its limit and 0 (one with others, which only a snapshot or the
  // min_duration it sent gives, has a record for them).
  Price effective;
  Seconds min_duration;
};

// An interned constraint set and the number of orders (ConsRef) that use it. Impl::interned owns it and
// frees it once unused (its sweep); a ConsRef is 8 bytes where a shared_ptr was 16.
struct InternedCons {
  BidConstraints c;
  mutable std::int64_t refs{0};
  // The numbers of c.regions (Impl::region_numbers), given when a bid with them first rests (Impl::region_nums).
  mutable std::vector<std::uint32_t> regions;
};

class ConsRef {
 public:
  ConsRef() = default;
  explicit ConsRef(const InternedCons* p) : p_(p) { retain(); }
  ConsRef(const ConsRef& o) : p_(o.p_) { retain(); }
  ConsRef& operator=(const ConsRef& o) {
    if (p_ != o.p_) {
      release();
      p_ = o.p_;
      retain();
    }
    return *this;
  }
  ConsRef(ConsRef&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  ConsRef& operator=(ConsRef&& o) noexcept {
    if (this != &o) {
      release();
      p_ = std::exchange(o.p_, nullptr);
    }
    return *this;
  }
  ~ConsRef() { release(); }
  const BidConstraints& operator*() const { return p_->c; }
  const BidConstraints* operator->() const { return &p_->c; }
  const InternedCons& interned() const { return *p_; }
  explicit operator bool() const { return p_ != nullptr; }

 private:
  void retain() const {
    if (p_) ++p_->refs;
  }
  void release() const {
    if (p_) --p_->refs;
  }
  const InternedCons* p_{nullptr};
};

// The pool a request names is not here: a sell's is its AskSide's pool, a buy's (rare, and ignored) in `cold`
// (RestOrder::request_pool).
struct RestRequest {
  enum : std::uint8_t {
    kStart = 1, kEnd = 2, kDuration = 4, kExpire = 8, kColdEnd = 16, kColdStart = 32, kColdDuration = 64
  };
  enum class MarketKind : std::uint8_t { empty, resolved, cold };
  Price price;
  Qty32 quantity;
  Qty32 min_chunk{Qty(1)};
  // The start and the end are the order's window_start and window_end (every accepted fixed-window bid has
  // its window there, and every sell whose start was not in the past: 8 bytes less per order each), or in `cold`
  // when not (kColdStart, kColdEnd). The duration (a duration bid's) is here when it fits 32 bits, or in `cold`
  // (kColdDuration).
  ConsRef cons;
  ColdRef cold;
  std::uint32_t duration_v{0};
  // The one-byte fields last: RestOrder puts its status, reason and updated_after in the six bytes of tail padding.
  Side side{Side::buy};
  TimeInForce time_in_force{TimeInForce::gtc};
  StpMode stp{StpMode::cancel_newest};
  bool post_only{false};
  std::uint8_t has{0};
  MarketKind market_kind{MarketKind::empty};

  // A static member, not a function-local static: no guard to check on every call (the walks ask often).
  static inline const BidConstraints kNone{};
  static const BidConstraints& no_constraints() { return kNone; }
  const BidConstraints& constraints() const { return cons ? *cons : no_constraints(); }
  std::optional<Seconds> duration() const {
    if (!(has & kDuration)) return std::nullopt;
    return (has & kColdDuration) ? cold->duration : Seconds(duration_v);
  }
  std::optional<Seconds> expire_at() const {
    return (has & kExpire) ? std::optional<Seconds>(cold->expire_at) : std::nullopt;
  }
  bool has_client_order_id() const { return cold && !cold->client_order_id.empty(); }
};

// An open order as the engine keeps it (Order's fields, the request compact, the market interned);
// events and queries get the full Order from Impl::to_order.
struct Book;

struct RestOrder {
  OrderId id;
  AccountId account;
  // Its status and reason in the request's tail padding (8 bytes less per order), and updated_at as seconds after
  // created_at (8 more; updated_at(), set_updated_at()).
  [[no_unique_address]] RestRequest request;
  OrderStatus status{OrderStatus::open};
  Reason reason{Reason::none};
  // A 32-bit field's value that says the whole one is in request.cold (updated_at(), window_end(), priority()).
  static constexpr std::uint32_t kWide = std::numeric_limits<std::uint32_t>::max();
  std::uint32_t updated_after{0};
  Book* book{nullptr};  // its market's book (a value of Impl::books)
  Seconds window_start;
  Seconds created_at;
  // A bid's GPUs and an ask's GPU-seconds share storage: a bid's GPU-seconds and an ask's filled and
  // remaining GPUs are always 0 (Order), so only the side's own members are set and read (make_order and
  // rest_into choose by side; a sell's are set when it is placed).
  union {
    Qty filled{};
    std::int64_t filled_gpu_seconds;
  };
  union {
    Qty remaining{};
    std::int64_t free_gpu_seconds;
  };
  Owned<AskSide> ask;  // a sell's from its placement on; a bid's null (unless a snapshot gave it any of them)
  Bucket bucket;
  // Its window's end as seconds after window_start, and its priority as commands after its id (a placement's
  // own seq, which an amend that loses time priority moves on; a priority is never before its id in this
  // engine), each kWide when the 32 bits cannot hold it (a window of more than 136 years, an order amended
  // 2^32 - 1 commands after its placement, or a restored one): 8 bytes less per order.
  std::uint32_t window_length{0};
  std::uint32_t priority_lag{0};
  // Last: LiveOrder puts its bid_group in the 4 bytes of tail padding.

  Qty filled_gpus() const { return is_buy() ? filled : Qty(0); }
  Qty remaining_gpus() const { return is_buy() ? remaining : Qty(0); }
  std::int64_t filled_seconds() const { return is_sell() ? filled_gpu_seconds : 0; }
  std::int64_t free_seconds() const { return is_sell() ? free_gpu_seconds : 0; }

  std::uint64_t body_hash() const { return request.cold ? request.cold->body_hash : 0; }
  bool is_buy() const { return request.side == Side::buy; }
  bool is_sell() const { return request.side == Side::sell; }
  bool is_duration_bid() const { return is_buy() && (request.has & RestRequest::kDuration); }
  bool is_open() const { return !is_terminal(status); }
  const MarketId* market() const;  // its book's key in Impl::books (not stored: 8 bytes less per order)
  PoolId request_pool() const;     // its request's pool (not stored in the request: see RestRequest)
  std::int32_t green_discount_bps() const { return ask ? ask->green_discount_bps : 0; }
  Price effective_price() const { return ask ? ask->effective : request.price; }
  Seconds min_duration() const { return ask ? ask->min_duration : Seconds(0); }
  // The same of a sell (only: its AskSide is always there, a bid's may not be), without the test for a bid's
  // record: the matching, index and view paths read them of asks only (plain -0.39 % instructions).
  Price ask_effective_price() const { return ask->effective; }
  Seconds ask_min_duration() const { return ask->min_duration; }

  // Its updated_at, kept as seconds after created_at (which must be set first) when that fits 32 bits (time
  // never goes backwards, and 2^32 - 1 seconds are 136 years), else in request.cold (a restored order's, or
  // one whose life outlasts that). Unsigned arithmetic: any two times give their difference and back exactly.
  Seconds updated_at() const {
    if (updated_after == kWide) [[unlikely]] return request.cold->updated_at;
    return Seconds(after(created_at.value, updated_after));
  }
  void set_updated_at(Seconds t) {
    if (!fits(created_at.value, t.value, updated_after)) set_wide([&](RestCold& c) { c.updated_at = t; });
  }
  // The same of window_end after window_start (set_window: both; window_start is set only with it).
  Seconds window_end() const {
    if (window_length == kWide) [[unlikely]] return request.cold->window_end;
    return Seconds(after(window_start.value, window_length));
  }
  void set_window(Seconds ws, Seconds we) {
    window_start = ws;
    if (!fits(ws.value, we.value, window_length)) set_wide([&](RestCold& c) { c.window_end = we; });
  }
  // And priority after id (set the id first).
  Seq priority() const {
    if (priority_lag == kWide) [[unlikely]] return request.cold->priority;
    return after(id.value, priority_lag);
  }
  void set_priority(Seq p) {
    if (!fits(id.value, p, priority_lag)) set_wide([&](RestCold& c) { c.priority = p; });
  }

 private:
  // Unsigned arithmetic: any two values give their difference and back exactly.
  static std::int64_t after(std::int64_t base, std::uint32_t d) {
    return static_cast<std::int64_t>(static_cast<std::uint64_t>(base) + d);
  }
  // Sets `field` to v - base and returns true if that fits below kWide; else sets it to kWide and returns false.
  static bool fits(std::int64_t base, std::int64_t v, std::uint32_t& field) {
    const std::uint64_t d = static_cast<std::uint64_t>(v) - static_cast<std::uint64_t>(base);
    field = d < kWide ? static_cast<std::uint32_t>(d) : kWide;
    return d < kWide;
  }
  // The rare case: request.cold replaced by a copy (or a new one) with `set` applied.
  template <class F>
  [[gnu::noinline]] void set_wide(F set) {
    auto cold = request.cold ? std::make_unique<RestCold>(*request.cold) : std::make_unique<RestCold>();
    set(*cold);
    request.cold = ColdRef(std::move(cold));
  }
};

static_assert(offsetof(RestOrder, updated_after) < offsetof(RestOrder, request) + sizeof(RestRequest),
              "status, reason and updated_after sit in the request's tail padding");

// 144 bytes (SlabMap: 1,820 slots a 256 KiB block, numbered with a power-of-two stride): bid_group in the tail padding
// of `o`, the timer in 32 bits (with whether the order was closed), what its view shows in 4 bytes (ShownMark); an
// ask's own fields are in its AskSide.
struct LiveOrder {
  // `timer`: the time of its pending timer (the one Impl::run_due honours; the heap may hold stale ones) as
  // seconds after created_at, or one of these.
  static constexpr std::int32_t kNoTimer = -1;
  static constexpr std::int32_t kWideTimer = -2;  // pending at a time that does not fit: any of its entries is honoured
  static constexpr std::int32_t kClosed = -3;     // closed (hook's end of the order): no timer, and not closed again

  [[no_unique_address]] RestOrder o;
  int bid_group{-1};  // buy: index of its constraint group in its Book (from when it first rests to its end)
  [[no_unique_address]] ShownMark shown;
  bool in_book{false};
  bool in_spot{false};  // sell: also in its pool's book_spot_asks
  bool counted{false};
  bool kept{false};     // in its book sets while a fill changes it (unhook(lo, true) until the next hook)
  std::uint32_t account_slot{0};  // its place in its Account's orders
  std::int32_t timer{kNoTimer};
  // Sell: its pool (AskSide::pool); in its AskPool while in_book.
  LivePool* pool() const { return o.ask->pool; }
};
static_assert(sizeof(LiveOrder) == 144, "1,820 order slots in a 256 KiB block");

inline std::uint32_t& account_slot(LiveOrder& lo) { return lo.account_slot; }
inline std::uint32_t& pool_slot(LiveOrder& lo) { return lo.o.ask->pool_slot; }

// Pointers by a 64-bit id in an open-addressing table (linear probing, at most half full), for maps whose
// values stay put (std::map nodes) and are never erased, so neither is an entry: a lookup is a probe or two,
// not a descent of the map's nodes (a cache miss each in a big map). Each id goes in once, with a non-null
// pointer (null marks an empty slot).
template <class T>
class IdIndex {
 public:
  struct Slot {
    std::int64_t id{0};
    T* p{nullptr};  // null: empty
  };
  // id's slot, or null.
  const Slot* find(std::int64_t id) const {
    if (slots_.empty()) return nullptr;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t h = home(id, mask); slots_[h].p; h = (h + 1) & mask) {
      if (slots_[h].id == id) return &slots_[h];
    }
    return nullptr;
  }
  std::size_t size() const { return count_; }
  // `id` must not be in yet; p not null.
  void insert(std::int64_t id, T* p) {
    if ((count_ + 1) * 2 > slots_.size()) {
      std::vector<Slot> old = std::move(slots_);
      slots_.assign(old.empty() ? 256 : old.size() * 2, Slot{});
      count_ = 0;
      for (const Slot& e : old) {
        if (e.p) insert(e.id, e.p);
      }
    }
    const std::size_t mask = slots_.size() - 1;
    std::size_t h = home(id, mask);
    while (slots_[h].p) h = (h + 1) & mask;
    slots_[h] = Slot{id, p};
    ++count_;
  }

 private:
  static std::size_t home(std::int64_t id, std::size_t mask) {
    return static_cast<std::size_t>((static_cast<std::uint64_t>(id) * 0x9E3779B97F4A7C15ull) >> 32) & mask;
  }
  std::vector<Slot> slots_;
  std::size_t count_{0};
};

// The open orders by id (terminal ones until their command ends), and the live leases: values in blocks of
// slots that are reused (one 256 KiB allocation per 1,820 orders instead of a node each, and addresses stay
// stable while an order lives), found through an open-addressing table of (id, slot) with linear probing
// and backward-shift erase. (The book's growth costs page faults; gpuexd's allocator keeps the heap in
// huge pages, alloc/.) The subset of std::unordered_map's interface the engine uses; iteration order is
// the slots' (unspecified, as before: every caller that needs an order sorts). A value holds its own id
// (SlabKey<V>::of), so a slot is the value alone: no copy of the id beside it (8 bytes a slot).
template <class V>
struct SlabKey;

template <class K, class V>
class SlabMap {
 public:
  using value_type = V;

  class iterator {
   public:
    value_type& operator*() const { return *m_->slot(i_); }
    value_type* operator->() const { return m_->slot(i_); }
    iterator& operator++() {
      i_ = m_->next_used(i_ + 1);
      return *this;
    }
    bool operator==(const iterator& o) const { return i_ == o.i_; }
    std::uint32_t slot_number() const { return i_; }  // at_slot's argument while the value lives

   private:
    friend class SlabMap;
    iterator(const SlabMap* m, std::uint32_t i) : m_(m), i_(i) {}
    const SlabMap* m_{nullptr};
    std::uint32_t i_{0};
  };

  SlabMap() = default;
  SlabMap(const SlabMap&) = delete;
  SlabMap& operator=(const SlabMap&) = delete;
  ~SlabMap() {
    for (std::uint32_t i = 0; i < slots_; ++i) {
      if (used_[i]) std::destroy_at(slot(i));
    }
  }

  std::size_t size() const { return count_; }
  iterator begin() const { return iterator(this, next_used(0)); }
  iterator end() const { return iterator(this, slots_); }

  iterator find(K id) const {
    if (table_.empty()) return end();
    const std::uint32_t t = tag(id.value);
    for (std::size_t h = home(t);; h = (h + 1) & mask_) {
      const Entry& e = table_[h];
      if (e.slot == kEmpty) return end();
      if (e.tag == t && key_of(e.slot) == id) return iterator(this, e.slot);
    }
  }
  std::size_t count(K id) const { return find(id) == end() ? 0 : 1; }
  V& at_slot(std::uint32_t s) const { return *slot(s); }
  bool holds(std::uint32_t s) const { return s < slots_ && used_[s]; }  // whether slot s holds a value (checks)
  V& at(K id) const {
    const iterator it = find(id);
    if (it == end()) throw std::out_of_range("SlabMap::at");
    return *it;
  }
  // Inserts `lo` under `id` (its id is set to it) unless present.
  std::pair<iterator, bool> emplace(K id, V lo) {
    if (iterator it = find(id); it != end()) return {it, false};
    if (needs_room()) grow();
    const std::uint32_t s = take_slot();
    SlabKey<V>::of(lo) = id;
    std::construct_at(slot(s), std::move(lo));
    return {insert_at(id, s), true};
  }
  // A default value under `id`, which must be new (order and lease ids only grow), built in
  // its slot: no temporary moved in.
  // One probe: the run from the id's home is searched for it and ends at the empty entry it goes into.
  iterator emplace_new(K id) {
    if (needs_room()) grow();
    const std::uint32_t t = tag(id.value);
    std::size_t h = home(t);
    for (; table_[h].slot != kEmpty; h = (h + 1) & mask_) {
      if (table_[h].tag == t && key_of(table_[h].slot) == id) throw std::logic_error("id in use");
    }
    const std::uint32_t s = take_slot();
    SlabKey<V>::of(*std::construct_at(slot(s))) = id;
    used_[s] = true;
    table_[h] = Entry{t, s};
    ++count_;
    return iterator(this, s);
  }
 private:
  // A free slot (the table has room: callers grow it first).
  std::uint32_t take_slot() {
    std::uint32_t s;
    if (!free_.empty()) {
      s = free_.back();
      free_.pop_back();
    } else {
      if constexpr (kStride != kBlock) {
        if (slots_ % kStride == kBlock) next_block();
      }
      if (slots_ % kStride == 0) blocks_.push_back(std::make_unique_for_overwrite<Storage[]>(kBlock));  // no zeroing: slots are constructed on use
      s = slots_++;
      used_.push_back(false);
    }
    return s;
  }
  // Past a block's last slot: on to the next block's first (out of line: once a block).
  [[gnu::noinline]] void next_block() {
    slots_ += kStride - kBlock;
    used_.resize(slots_, false);
  }
  iterator insert_at(K id, std::uint32_t s) {
    used_[s] = true;
    place(tag(id.value), s);
    ++count_;
    return iterator(this, s);
  }

 public:
  void erase(K id) {
    if (table_.empty()) return;
    const std::uint32_t t = tag(id.value);
    std::size_t h = home(t);
    while (table_[h].tag != t || table_[h].slot == kEmpty || key_of(table_[h].slot) != id) {
      if (table_[h].slot == kEmpty) return;
      h = (h + 1) & mask_;
    }
    const std::uint32_t s = table_[h].slot;
    // Backward-shift: pull later entries of the probe run into the hole while their home allows it.
    for (std::size_t j = (h + 1) & mask_; table_[j].slot != kEmpty; j = (j + 1) & mask_) {
      const std::size_t k = home(table_[j].tag);
      if (((j - k) & mask_) >= ((j - h) & mask_)) {
        table_[h] = table_[j];
        h = j;
      }
    }
    table_[h].slot = kEmpty;
    std::destroy_at(slot(s));
    used_[s] = false;
    free_.push_back(s);
    --count_;
  }

 private:
  // A table entry is 8 bytes: the id's low 32 bits (its hash is of those; ids are command sequence numbers,
  // so two live orders rarely share them) and the slot, whose order holds the whole id that a match is
  // confirmed with.
  static constexpr std::uint32_t kEmpty = std::numeric_limits<std::uint32_t>::max();
  struct Entry {
    std::uint32_t tag{0};
    std::uint32_t slot{kEmpty};
  };
  static std::uint32_t tag(std::int64_t id) { return static_cast<std::uint32_t>(static_cast<std::uint64_t>(id)); }
  // The table is kept at most 4/5 full (it doubles before one more entry would pass that), not half full: ids are
  // command sequence numbers, which the Fibonacci hash (home) spreads almost evenly, so probe runs stay short at
  // that load; half full, a book of 100,000 orders took a 262,144-entry table (2 MiB, ~21 bytes an order) where
  // 131,072 entries (1 MiB) hold it.
  bool needs_room() const { return (count_ + 1) * 5 > table_.size() * 4; }
  struct Storage {
    alignas(value_type) unsigned char bytes[sizeof(value_type)];
  };
  // 256 KiB: small enough that the last block's free slots are a few per cent of a large book (4 MiB blocks
  // rounded a 100,000-order book to whole ~11,000-slot blocks: a smaller order saved nothing until it
  // saved a block), large enough that a new block is rare (jemalloc's heap is in huge pages anyway).
  // Slots per block: as many as fill 256 KiB, or the power of two below when that many fill one of jemalloc's
  // large size classes (four per doubling) exactly (160-byte slots: 1,024 in 160 KiB): such a block wastes no slot
  // numbers (kStride below is kBlock) and no bytes of its class. Otherwise the numbers past a block's last slot go
  // unused (a 104-byte slot: 2,520 slots a block, a stride of 4,096).
  static constexpr std::uint32_t kFill = static_cast<std::uint32_t>((std::size_t{256} << 10) / sizeof(Storage));
  static constexpr bool whole_class(std::size_t bytes) { return size_class(bytes) == bytes; }
  static constexpr std::uint32_t kBlock =
      whole_class(std::size_t{std::bit_floor(kFill)} * sizeof(Storage)) ? std::bit_floor(kFill) : kFill;
  // A slot's number is its block's times kStride, the power of two from kBlock, plus its place in the block, so
  // that the block and the place are a shift and a mask, not a division, also when kBlock is not a power of two
  // (LiveOrder's 144 bytes: 1,820 slots a block); the numbers from kBlock to kStride - 1 of a block are unused
  // (take_slot passes over them; used_ says false).
  static constexpr std::uint32_t kStride = std::bit_ceil(kBlock);
  static constexpr int kStrideBits = std::countr_zero(kStride);

  value_type* slot(std::uint32_t i) const {
    return std::launder(reinterpret_cast<value_type*>(blocks_[i >> kStrideBits][i & (kStride - 1)].bytes));
  }
  K key_of(std::uint32_t i) const { return SlabKey<V>::of(*slot(i)); }
  std::uint32_t next_used(std::uint32_t i) const {
    while (i < slots_ && !used_[i]) ++i;
    return i;
  }
  std::size_t home(std::uint32_t t) const {
    return static_cast<std::size_t>((std::uint64_t{t} * 0x9E3779B97F4A7C15ull) >> shift_);
  }
  void place(std::uint32_t t, std::uint32_t s) {
    std::size_t h = home(t);
    while (table_[h].slot != kEmpty) h = (h + 1) & mask_;
    table_[h] = Entry{t, s};
  }
  void grow() {
    std::vector<Entry> old = std::move(table_);
    const std::size_t n = old.empty() ? 1024 : old.size() * 2;
    table_.assign(n, Entry{});
    mask_ = n - 1;
    shift_ = 64 - std::countr_zero(n);
    for (const Entry& e : old) {
      if (e.slot != kEmpty) place(e.tag, e.slot);
    }
  }

  std::vector<std::unique_ptr<Storage[]>> blocks_;
  // A byte a slot, not std::vector<bool>'s bit: a bit's set and clear at every placement and removal were ~14
  // instructions of shifts and masks; a byte is one store (1 byte an order more).
  std::vector<std::uint8_t> used_;
  std::vector<std::uint32_t> free_;
  std::uint32_t slots_{0};
  std::vector<Entry> table_;
  std::size_t mask_{0};
  int shift_{64};
  std::size_t count_{0};
};

template <>
struct SlabKey<LiveOrder> {
  static OrderId& of(LiveOrder& lo) { return lo.o.id; }
  static OrderId of(const LiveOrder& lo) { return lo.o.id; }
};

using OrderMap = SlabMap<OrderId, LiveOrder>;

// An open order's slot number in Impl::orders (OrderMap::at_slot): the order lists below hold these, 4 bytes where a
// pointer is 8.
using OrderSlot = std::uint32_t;

// A growable array of OrderSlots in 16 bytes (a std::vector's 24), with push_back's compare-and-store inline and
// its growth (doubling, as a vector's) out of line: GCC left std::vector<std::uint32_t>::push_back out of line
// whole, ~23 instructions a call where the store is ~6.
class OrderSlots {
 public:
  OrderSlots() = default;
  OrderSlots(OrderSlots&& o) noexcept
      : data_(std::move(o.data_)), size_(std::exchange(o.size_, 0)), cap_(std::exchange(o.cap_, 0)) {}
  OrderSlots& operator=(OrderSlots&& o) noexcept {
    data_ = std::move(o.data_);
    size_ = std::exchange(o.size_, 0);
    cap_ = std::exchange(o.cap_, 0);
    return *this;
  }

  std::uint32_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  OrderSlot& operator[](std::uint32_t i) { return data_[i]; }
  OrderSlot operator[](std::uint32_t i) const { return data_[i]; }
  OrderSlot back() const { return data_[size_ - 1]; }
  const OrderSlot* begin() const { return data_.get(); }
  const OrderSlot* end() const { return data_.get() + size_; }
  void push_back(OrderSlot s) {
    if (size_ == cap_) [[unlikely]] grow();
    data_[size_++] = s;
  }
  void pop_back() { --size_; }

 private:
  [[gnu::noinline]] void grow() {
    cap_ = cap_ == 0 ? 1 : cap_ * 2;
    auto bigger = std::make_unique_for_overwrite<OrderSlot[]>(cap_);
    std::copy_n(data_.get(), size_, bigger.get());
    data_ = std::move(bigger);
  }
  std::unique_ptr<OrderSlot[]> data_;
  std::uint32_t size_{0};
  std::uint32_t cap_{0};
};
static_assert(sizeof(OrderSlots) == 16);

// Open orders in no particular order, with O(1) insert and erase (each order keeps its place, `Slot`). Callers
// that need id order sort ids().
struct OrderList {
  OrderSlots items;

  // `n`: the order's slot number in `orders`.
  template <std::uint32_t& (*Slot)(LiveOrder&)>
  void add(LiveOrder& lo, OrderSlot n) {
    Slot(lo) = items.size();
    items.push_back(n);
  }
  // The last entry moves into the hole and its order learns its new place.
  template <std::uint32_t& (*Slot)(LiveOrder&)>
  void remove(const OrderMap& orders, LiveOrder& lo) {
    const std::uint32_t i = Slot(lo);
    items[i] = items.back();
    Slot(orders.at_slot(items[i])) = i;
    items.pop_back();
  }
  bool empty() const { return items.empty(); }
  std::vector<OrderId> ids(const OrderMap& orders) const {
    std::vector<OrderId> out;
    out.reserve(items.size());
    for (OrderSlot n : items) out.push_back(orders.at_slot(n).o.id);
    std::sort(out.begin(), out.end());
    return out;
  }
};

// A pool's resting spot asks, by price level (a new ask is appended to its level).
using AskSet = LevelSet<AskKey, AskOrder>;

// Summaries of a set of ask keys that let a walk skip the whole set without reading a key: the earliest
// run_start(), latest run_end() and longest max_run among them. Exact after inserts; erases leave them
// wider (still true bounds), until the set empties and they reset.
struct RunBounds {
  Seconds min_start{std::numeric_limits<std::int64_t>::max()};
  Seconds max_end{std::numeric_limits<std::int64_t>::min()};
  std::int64_t max_run{0};
  void widen(const AskKey& k) {
    min_start = std::min(min_start, k.run_start());
    max_end = std::max(max_end, k.run_end());
    max_run = std::max<std::int64_t>(max_run, k.max_run);
  }
  // False when no key it bounds can hold [ws, we).
  bool may_fit(Seconds ws, Seconds we) const {
    return ws >= min_start && we <= max_end && (max_run == kAnyRun || (we - ws).value <= max_run);
  }
  bool bounds(const AskKey& k) const {
    return k.run_start() >= min_start && k.run_end() <= max_end && k.max_run <= max_run;
  }
  bool operator==(const RunBounds&) const = default;
};

// What few leases have (LiveLease::kRare), apart from the lease's slot.
struct LeaseRare {
  LeaseId split_from;
  Seconds preempted_at;
  Seconds ends_at;
  Price ask_list_price;
  Seconds ask_window_start;
  Seconds ask_window_end;
  Seconds ask_min_duration;
  Qty32 ask_min_chunk;
};
inline const LeaseRare kNoLeaseRare{};  // not a function-local static: no guard to check on every to_lease()

// A lease's trade's fields whole, when one of them does not fit LiveLease's compact form (LiveLease::kWide;
// apart from LeaseRare, whose entries preemptions make, so that those stay in a smaller size class).
struct LeaseWide {
  AccountId buyer;
  TradeId trade;
  OrderId buy_order;
  Price list_price;
  std::int32_t green_discount_bps{0};
  Bucket bucket;
};
inline const LeaseWide kNoLeaseWide{};

// A live lease in the engine's compact form (96 bytes against the public Lease's 248): what a Lease holds
// except what its pool gives (id, provider, market and tier are a pool's for life; the pool by its number,
// Impl::pool_list), one amount for `owed` and `billed` (a lease is billed when it ends, and owes nothing from
// then on), its trade's buyer, id, buy order, list price, green discount and bucket in 20 bytes (a 32-bit buyer,
// offsets from fields it has, a 16-bit discount and month), and apart (Impl::rare_leases; `has` says which a
// lease has) what few leases have: `split_from` and `preempted_at`, which only a preemption sets, an `ends_at`
// other than `end` (a preemption's or a release's), an ask list price other than its own list price (an ask
// amended before it ended), an ask window, min_duration or min_chunk that the compact fields do not hold (a
// min_duration past 65,535 s, a min_chunk past 65,535 GPUs), and the trade's six fields whole when one of them
// does not fit (kWide: a buyer's id past 2^32, a lease 2^32 leases after its trade, orders 2^31 commands apart,
// a list price $2,147 an hour from the price, or what a snapshot gives; in Impl::wide_leases). Impl::ends_at()
// and the accessors read them. to_lease() builds the public Lease (events, queries, snapshots), as to_order()
// builds an Order. 96 bytes, not 104: 2,048 slots a 192 KiB block (a jemalloc size class: no slot number unused),
// where 104 bytes took 2,520 slots a 256 KiB block; the buyer and the ask's min_duration and min_chunk are read
// on the preemption walk and on a lease's changes only.
struct LiveLease {
  static constexpr std::uint8_t kPreemptedAt = 1;
  static constexpr std::uint8_t kEndsAt = 2;  // it has an ends_at (every live lease the engine makes)
  static constexpr std::uint8_t kSplitFrom = 4;
  static constexpr std::uint8_t kRareEndsAt = 8;
  static constexpr std::uint8_t kRareAskPrice = 16;
  static constexpr std::uint8_t kRareAskTerms = 32;
  static constexpr std::uint8_t kWide = 64;          // the trade's fields are in Impl::wide_leases (set_trade_fields)
  static constexpr std::uint8_t kAskWithdrawn = 128;  // Lease::ask_withdrawn
  static constexpr std::uint8_t kRare = kPreemptedAt | kSplitFrom | kRareEndsAt | kRareAskPrice | kRareAskTerms;
  LeaseId id;
  OrderId sell_order;
  Seconds start;
  Seconds end;
  Price price;
  Micros amount{0};  // owed while not ended, then billed
  std::uint32_t buyer_{0};  // unless kWide
  std::uint32_t pool{0};  // its pool's number (LivePool::number; Impl::pools never erases a pool)
  // Unless kWide: the trade is this many leases before the lease (a split-off part's id is later than its
  // trade's first lease), the buy order this many commands after the sell order, the list price this much above
  // the price.
  std::uint32_t trade_lag{0};
  std::int32_t buy_offset{0};
  std::int32_t list_offset{0};
  Qty32 quantity;  // at most its bid's (validate's bound), as the ask's lot
  // The ask's window, min_duration and min_chunk (unless kRareAskTerms): its start this many seconds before the
  // lease's, its end this many after the lease's (a lease lies in its ask's window).
  std::uint32_t ask_lead{0};
  std::uint32_t ask_tail{0};
  std::uint32_t pool_slot{0};  // its place in its pool's `leases`
  std::uint16_t ask_min_duration_{0};
  std::uint16_t ask_min_chunk_{1};
  std::int16_t green_bps{0};     // unless kWide
  std::uint16_t month_code{0};   // unless kWide: its bucket, 0 spot, else year * 12 + month (month_code_of)
  LeaseStatus status{LeaseStatus::reserved};
  bool interruptible{false};
  bool ended{false};
  std::uint8_t has{0};

  Micros owed() const { return ended ? 0 : amount; }
  bool ask_withdrawn() const { return (has & kAskWithdrawn) != 0; }
  void set_ask_withdrawn(bool w) { has = static_cast<std::uint8_t>(w ? has | kAskWithdrawn : has & ~kAskWithdrawn); }
  // A bucket as month_code holds it (spot as 0), or nothing when it cannot: a negative value, a month's digits
  // outside 1-12, or a code past 65,535 (after 5461-03).
  static bool month_code_of(Bucket b, std::uint16_t& code) {
    const std::int32_t year = b.yyyymm / 100;
    const std::int32_t month = b.yyyymm % 100;
    if (b.is_spot()) {
      code = 0;
    } else if (b.yyyymm < 0 || month < 1 || month > 12 ||
               year * 12 + month > std::numeric_limits<std::uint16_t>::max()) {
      return false;
    } else {
      code = static_cast<std::uint16_t>(year * 12 + month);
    }
    return true;
  }
  // The trade's fields, read through `w`: its entry in Impl::wide_leases when it has kWide (Impl::wide_for).
  AccountId buyer(const LeaseWide& w) const { return (has & kWide) ? w.buyer : AccountId(buyer_); }
  TradeId trade(const LeaseWide& w) const { return (has & kWide) ? w.trade : TradeId(id.value - trade_lag); }
  OrderId buy_order(const LeaseWide& w) const {
    return (has & kWide) ? w.buy_order : OrderId(sell_order.value + buy_offset);
  }
  Price list_price(const LeaseWide& w) const { return (has & kWide) ? w.list_price : price + Price(list_offset); }
  std::int32_t green_discount_bps(const LeaseWide& w) const { return (has & kWide) ? w.green_discount_bps : green_bps; }
  Bucket bucket(const LeaseWide& w) const {
    if (has & kWide) return w.bucket;
    if (month_code == 0) return Bucket::spot();
    return Bucket{((month_code - 1) / 12) * 100 + (month_code - 1) % 12 + 1};
  }
  // The fields that may be kept apart, read through `r`: its entry in Impl::rare_leases when it has the field's
  // flag (Impl::rare_for).
  Seconds ends_at(const LeaseRare& r) const { return (has & kRareEndsAt) ? r.ends_at : end; }
  Price ask_list_price(const LeaseRare& r, const LeaseWide& w) const {
    return (has & kRareAskPrice) ? r.ask_list_price : list_price(w);
  }
  Seconds ask_window_start(const LeaseRare& r) const {
    return (has & kRareAskTerms) ? r.ask_window_start : start - Seconds(ask_lead);
  }
  Seconds ask_window_end(const LeaseRare& r) const { return (has & kRareAskTerms) ? r.ask_window_end : end + Seconds(ask_tail); }
  Seconds ask_min_duration(const LeaseRare& r) const {
    return (has & kRareAskTerms) ? r.ask_min_duration : Seconds(ask_min_duration_);
  }
  Qty ask_min_chunk(const LeaseRare& r) const {
    return (has & kRareAskTerms) ? Qty(r.ask_min_chunk) : Qty(ask_min_chunk_);
  }
};
static_assert(sizeof(LiveLease) == 96);

template <>
struct SlabKey<LiveLease> {
  static LeaseId& of(LiveLease& l) { return l.id; }
  static LeaseId of(const LiveLease& l) { return l.id; }
};

// A pool's live lease, in (price, id) order: the order preemption considers them in. A lease's price never
// changes; `l` points into Impl::leases (a SlabMap: stable while the lease lives), and its id is read
// through it (16 bytes, not 24: only keys of equal price compare ids).
struct LeaseRef {
  Price price;
  LiveLease* l{nullptr};
  // The lease's start and end (which never change), copied: preempt_candidates passes over a lease whose time
  // cannot hold the bid's window without reading the lease (a cache miss each, most of that search's time in
  // the realistic bench's 1,000,000 commands, where spot pools' leases pile up).
  Seconds start;
  Seconds end;
  explicit LeaseRef(LiveLease& lease) : price(lease.price), l(&lease), start(lease.start), end(lease.end) {}
  bool operator<(const LeaseRef& o) const { return price != o.price ? price < o.price : l->id < o.l->id; }
};

// The fields a walk reads of a pool it looks at are placed for its std::map node (Impl::pools): book_number and
// region first, in the node's first line with its links, its key and p's id and provider (pool_admits, the run
// scan's provider test, bids_for); spot_runs and book_spot_asks' head in the line after p (a duration bid's walk
// opening the pool). A walk's first look at a pool reads one or two lines, not four.
struct LivePool {
  // Its number in its Book for BidGroup::verdicts (the maximum until an ask of it first walks the bids).
  mutable std::uint32_t book_number{std::numeric_limits<std::uint32_t>::max()};
  std::uint32_t region{0};  // its region's number (Impl::region_numbers; a pool's region never changes)
  Pool p;
  std::uint32_t number{0};  // its place in Impl::pool_list (LiveLease::pool)
  std::uint32_t ask_pool_slot{0};  // its place in its Book's ask_pools while it has resting asks
  // The run bounds of its spot asks (RunBounds{} when it has none), which let a duration bid's walk pass over the
  // pool without reading a key, and its resting asks that a duration bid could use now (spot_now), in ask
  // priority order.
  RunBounds spot_runs;
  AskSet book_spot_asks;
  StepTree used;  // open asks' free capacity + GPUs held by leases, over time
  OrderList asks;  // open asks
  // Its live leases (not ended): all of them unordered, by their slots in Impl::leases (4 bytes, not a pointer's
  // 8; a lease knows its place here, LiveLease::pool_slot), as a pool's capacity and its retirement read them; a
  // spot pool's also by (price, id), as preemption takes the cheapest first (only a spot pool's leases can be
  // preempted).
  std::vector<std::uint32_t> leases;
  ChunkedSet<LeaseRef, std::less<LeaseRef>> spot_leases;
  // How many of its asks are in its book (32-bit: the node stays 512 bytes).
  std::uint32_t book_count{0};
  // Its number in its Book's RunIndex (the maximum until its first ask is indexed).
  mutable std::uint32_t run_number{std::numeric_limits<std::uint32_t>::max()};
  // Its market's book (a pool's market never changes), once looked up.
  Book* book{nullptr};
  // The constraint groups of its Book that it may satisfy (Impl::groups_of), as of the Book's groups_made.
  mutable std::vector<std::uint32_t> groups_ok;
  mutable std::uint64_t groups_seen{0};
};
// A std::map node of it (32 bytes of links and 8 of key) in jemalloc's 512-byte class, not the 640-byte one.
static_assert(sizeof(LivePool) <= 472, "Impl::pools' node outgrows its 512-byte size class");

using BidSet = LevelSet<BidKey, BidOrder>;  // by price level (a new bid is appended to its level)

// A resting fixed-window bid as an ask's walk reads it (40 bytes: the window is copied so that the walk
// judges a bid without reading its order; the id is read from the order only when it is returned, or when
// two priorities tie).
struct BidEntry {
  Price price;
  Seq priority{0};
  LiveOrder* lo{nullptr};
  Seconds start{};
  Seconds end{};
  bool operator==(const BidEntry&) const = default;
};

// A cell's order: price descending (a walk stops at its floor), then priority; the order's address only
// to tell entries apart (a walk sorts its candidates in BidOrder itself).
struct BidEntryLess {
  bool operator()(const BidEntry& x, const BidEntry& y) const {
    if (x.price.value != y.price.value) return x.price.value > y.price.value;
    if (x.priority != y.priority) return x.priority < y.priority;
    return std::less<const LiveOrder*>()(x.lo, y.lo);
  }
};

// Resting fixed-window bids (of one BidSets) in cells by the week (kRunSlot) of their window's start and of
// its end: the mirror of the RunIndex. An ask can serve a bid only if the bid's window lies inside the ask's
// (from max(start, now) to its end), so a walk reads only the cells whose start week is at least from's and
// whose end week is at most the end's, instead of every bid of every set its pool's constraints admit
// (~9 in 10 of which it skipped). Rows and cells are sorted vectors (an index holds a few rows of a few
// cells: ~2 rows and ~4 cells read per gather in the realistic bench, which a map's nodes made a pointer
// chase and an out-of-line increment each); empty cells and rows are erased. check_invariants compares the
// index with the resting bids.
constexpr std::int64_t kNoBid = std::numeric_limits<std::int64_t>::min();

struct BidCell {
  std::int64_t end_week{0};
  ChunkedSet<BidEntry, BidEntryLess> bids;
  // The highest price among them, beside the set: an ask's walk passes over a cell priced out without
  // loading its chunks (a cell is erased when it empties).
  std::int64_t best{kNoBid};
};

struct BidRow {
  std::int64_t start_week{0};
  // The highest of its cells' `best`: a walk passes over a row priced out without reading its cells.
  std::int64_t best{kNoBid};
  std::vector<BidCell> cells;  // by end week
  void refresh_best() {
    best = kNoBid;
    for (const BidCell& c : cells) best = std::max(best, c.best);
  }
};

struct BidIndex {
  // The highest of its rows' `best` (the minimum when empty): a walk passes over an index priced out without
  // reading a row (two in three of the indexes an ask's walk gathers from in the realistic bench). First, and
  // then its rows: in a BidGroup's first line (BidSets).
  std::int64_t best{kNoBid};
  std::vector<BidRow> rows;  // by start week
  std::size_t size{0};
  std::uint64_t version{0};  // bumped by every insert and erase: an ask's walk re-seeks its cursors (BidWalk)
  void refresh_best() {
    best = kNoBid;
    for (const BidRow& r : rows) best = std::max(best, r.best);
  }
  // The first row whose start week is not before `week`. The first row itself, without the search, when it is
  // not before it: an ask's window that starts now (~2 in 5 in the realistic bench) starts before every resting
  // fixed-window bid, and each walk asks this of every index it reads, twice (find_first, make_cursors).
  std::vector<BidRow>::const_iterator row_from(std::int64_t week) const {
    if (rows.empty() || rows.front().start_week >= week) return rows.begin();
    return std::partition_point(rows.begin() + 1, rows.end(), [&](const BidRow& r) { return r.start_week < week; });
  }
  // The cell of (start week, end week) and its row, or nulls.
  std::pair<const BidRow*, const BidCell*> find(std::int64_t start_week, std::int64_t end_week) const {
    const auto r = row_from(start_week);
    if (r == rows.end() || r->start_week != start_week) return {nullptr, nullptr};
    const auto c = std::partition_point(r->cells.begin(), r->cells.end(),
                                        [&](const BidCell& x) { return x.end_week < end_week; });
    if (c == r->cells.end() || c->end_week != end_week) return {&*r, nullptr};
    return {&*r, &*c};
  }
};

// Resting duration (spot) bids, in (price desc, priority) order, and fixed-window bids in their index.
struct BidSets {
  // The price of duration's first bid (kNoBid when empty; Impl::insert_duration and erase_duration keep it): a
  // walk passes over a duration set priced out without reading its chunks. Then fixed's best price and its rows'
  // begin: the start of BidGroup::any, in the group's first line (the rows' end is in the second).
  std::int64_t duration_best{kNoBid};
  BidIndex fixed;
  BidSet duration;
};

// Resting bids whose constraints are equal once their regions are set aside (`rep`, regions empty). A
// bid without regions rests in `any`; one with regions in the sets of each region it names, so that an ask
// walks only the bids its pool's region admits, and judges the other constraints once per group (fixed-window
// bids too: an ask's walk reads no index entry of a group its pool does not satisfy, which were ~7 in 10 of
// the entries it read when a region's fixed-window bids of every group shared one index).
//
// A group whose last open bid ended (`users`; the group without constraints, one a book, is kept for good) is
// listed in Book::free_groups: kept as it is, for its constraint set's next bid, until a new constraint set needs
// a group and takes its slot. So a book keeps as many groups as the distinct constraint sets its open bids had at
// once, not as many as it ever saw.
//
// What bids_for reads of each group its pool may satisfy comes first, in one line (the groups are aligned to
// it): resting, energy, by_region and the start of `any` (its best prices and its fixed-window rows' begin). They
// were spread over four lines of a 296-byte group, each a miss (~280 groups in the realistic bench).
struct alignas(64) BidGroup {
  std::int64_t resting{0};
  // `verdicts` (below) keeps pool_fits_spec(pool, rep), which reads only what a pool keeps for life (its spec:
  // tier, region, fabric, NVLink, SLA, energy figures), by the pool's number in its Book (LivePool::book_number;
  // -1: not judged yet). With energy constraints (`energy`), the pool must also be verified now
  // (pool_verified_for), which a verdict cannot keep.
  bool energy{false};
  bool listed{false};    // in Book::free_groups (since users last fell to 0; it may have users again)
  // How many times its slot was taken by another group: group_by_cons' entries of an earlier one are stale.
  std::uint32_t gen{0};
  // By region number (Impl::region_numbers), as far as its bids' regions go; null: a region none named. Behind
  // pointers: a bid naming a late-numbered region (up to ~676 two-letter codes) must not cost the group a whole
  // BidSets for every number before it.
  std::vector<std::unique_ptr<BidSets>> by_region;
  BidSets any;
  std::int64_t users{0};  // open bids whose bid_group is this one, resting or not
  mutable std::vector<std::int8_t> verdicts;
  BidConstraints rep;
};

inline PoolId RestOrder::request_pool() const {
  if (is_sell()) return ask->pool->p.id;
  return request.cold ? request.cold->pool : PoolId();
}

// A pool with resting asks (LivePool::book_count of them; fixed-window bids find them through the RunIndex, the
// rare paths that need them all through its open asks, Impl::for_each_resting_ask), and the cheapest price of
// those in book_spot_asks (spot_cheapest: kNoSpotAsk when it is empty; their run bounds are LivePool::spot_runs).
constexpr Price kNoSpotAsk{std::numeric_limits<std::int64_t>::max()};
struct AskPool {
  LivePool* lp{nullptr};
  Price spot_cheapest{kNoSpotAsk};
};

// An ask pool with spot asks and its cheapest (AskPool::spot_cheapest), in Book::spot_by_price: ordered by
// price, then by address (equal prices: any fixed order does, a walk merges the pools' keys by key).
struct SpotPool {
  Price cheapest;
  const LivePool* lp{nullptr};
  bool operator<(const SpotPool& o) const {
    return cheapest != o.cheapest ? cheapest < o.cheapest : std::less<const LivePool*>()(lp, o.lp);
  }
};

// One run of a resting ask's free capacity (a maximal stretch of time with at least one lot, its min_chunk,
// free throughout; summarize_runs' runs) as a fixed-window bid's walk reads it: the ask can serve [ws, we)
// only if one of its runs holds it (runs are disjoint, so at most one does). 40 bytes: the ask's priority is
// copied so that a walk orders its candidates without reading the order (a cache miss each); the times are
// 32-bit (the index serves windows with 0 <= ws < we <= kRunMax, exactly: start clamped up to 0, end and
// min_duration down to kRunMax and kRunMax + 1; runs that can hold no such window are not indexed); the pool
// is its number in the index (RunIndex::pools).
constexpr std::int64_t kRunMax = std::int64_t{std::numeric_limits<std::uint32_t>::max()} - 1;

struct RunEntry {
  Price effective;
  Seq priority{0};
  LiveOrder* lo{nullptr};
  std::uint32_t start{0};
  std::uint32_t end{0};
  std::uint32_t min_duration{0};
  std::uint32_t pool : 31 = 0;
  std::uint32_t unit_lot : 1 = 0;  // the ask's min_chunk is 1
  bool operator==(const RunEntry&) const = default;
};

// The free runs of a market's resting asks, in a table of cells by the week (kRunSlot) of their start and of
// their end, so that a window [ws, we) reads only cells whose runs may hold it (start week <= ws's, end week
// >= we's) instead of every ask of every pool its price admits. A cell's entries are sorted by (effective,
// priority, lo, start) in chunks (ChunkedSet: an insert or erase moves at most a chunk): a walk stops at its
// limit price, and an ask leaving the book finds its entries by binary search (its runs are recomputed from
// its free capacity, which does not change while it rests). A market's index is built by its first
// fixed-window bid's walk and kept from then on (`enabled`): a market of duration bids only, like the plain
// workload's, never pays for it. check_invariants compares the whole index with a recomputation.
//
// The table (RunIndex::rows): row r holds the runs that start in week first_week + r, row 0 also those that
// start before (first_week: the week the index was built in); cell c of a row those that end c weeks after
// the row's week, cell 0 also those that end before and the last cell (kRunCells - 1) those that end later.
// A run's cell is found by arithmetic (an update is the cell's set insert or erase alone), and a walk reads
// rows 0 to ws's and in each the cells from we's on: the edges only put more runs in the cells it reads
// (each run's times are checked), never a run that holds the window in a cell it does not read. Rows and
// cells are added as runs need them and kept when they empty (an empty cell's least is the maximum, an empty
// row's count is 0: a walk passes over either with one comparison, e.g. the rows of weeks gone by).
constexpr std::int64_t kRunSlot = 7 * 86'400;
constexpr std::size_t kRunCells = 64;  // weeks: a run that ends later than that after its start week is in its row's last cell

inline std::int64_t run_slot(Seconds t) {
  const std::int64_t v = t.value;
  return v >= 0 ? v / kRunSlot : -((-v + kRunSlot - 1) / kRunSlot);
}

struct RunEntryLess {
  bool operator()(const RunEntry& x, const RunEntry& y) const {
    if (x.effective.value != y.effective.value) return x.effective.value < y.effective.value;
    if (x.priority != y.priority) return x.priority < y.priority;
    if (x.lo != y.lo) return std::less<const LiveOrder*>()(x.lo, y.lo);
    return x.start < y.start;
  }
};

// Chunks of at most 31 entries (32 before a split: 1,280 bytes), not the default 63: a run's insert or erase shifts
// the entries after it in its chunk (~100 instructions of memmove at 63), while a scan pays only a few
// instructions a chunk more (realistic bench: index_run and unindex_run 513 K fewer, scan_runs 52 K more;
// 15 was worse).
using RunSet = ChunkedSet<RunEntry, RunEntryLess, 31>;

// One cell's runs, apart by their pool's tier (which never changes): a bid that excludes a tier (spot, unless
// it is interruptible; every tier but those it names) does not read that tier's runs.
constexpr std::size_t kTiers = static_cast<std::size_t>(Tier::spot) + 1;

inline std::size_t tier_index(Tier t) { return static_cast<std::size_t>(t); }

// A pool's region as one bit of a 64-bit set: its number (Impl::region_numbers) below 63, else bit 63, which
// numbers from 63 on share (a set of bits with it may hold any of them).
inline std::uint8_t region_bit_number(std::uint32_t region) {
  return static_cast<std::uint8_t>(std::min<std::uint32_t>(region, 63));
}
inline std::uint64_t region_bit(std::uint32_t region) { return std::uint64_t{1} << region_bit_number(region); }

// A cache line's start each (192 bytes, not 168): a walk that reads a cell reads the tiers' cheapest prices and
// regions and the start of tier 0's set in its first line, and the rest of that set and tier 1's in its second,
// not up to three lines wherever the cell fell (the regions at the end instead, in a third line, cost the
// realistic bench's walks 1 % more D1 misses).
struct alignas(64) RunCell {
  // Each tier's least effective price (the maximum when it has no run), beside the sets: a walk passes over
  // a tier priced out without loading its chunks.
  std::array<std::int64_t, kTiers> cheapest{kNoRun, kNoRun, kNoRun};
  // Each tier's regions: the region_bit of each of its runs' pools (exactly while its set is one chunk, as most
  // are; a set of more may keep the bit of a region whose runs left it until it is one chunk again: unindex_run).
  // A bid that names regions passes over a tier holding none of them without loading its chunks: in the
  // realistic bench, 7 in 10 of the tiers such bids' walks read, with 2 in 3 of the runs those walks read (their
  // limits leave them without candidates, so they read every run up to it). Beside the cheapest prices, in the
  // line a walk reads first; the cell stays 192 bytes (the room was alignment's).
  std::array<std::uint64_t, kTiers> regions{};
  std::array<RunSet, kTiers> by_tier;
  static constexpr std::int64_t kNoRun = std::numeric_limits<std::int64_t>::max();
};
static_assert(sizeof(RunCell) == 192, "RunCell's comment and RunCellRef::least's division assume 192 bytes");

struct RunRow {
  std::vector<RunCell> cells;  // by end week: see RunIndex
  // Each cell's least cheapest, by the cell's index: a walk passes over a cell priced out in every tier (most
  // cells, for a bid that does not cross) with one comparison, eight cells to a cache line (a 152-byte cell's
  // own field took a line a cell). The walk reads it by the cell's index (no division in its loop).
  std::vector<std::int64_t> least;
  std::size_t size{0};  // the entries in its cells
};

// A cell as an update finds it: its row (whose count changes) and the cell.
struct RunCellRef {
  RunRow* row{nullptr};  // null: no such cell (find)
  RunCell* cell{nullptr};
  // The cell's least in its row, found from the cell's place (a division by 192) on the updates' rare path only,
  // when a cheapest changed: an index carried beside the cell cost every update an instruction or two.
  std::int64_t& least() const { return row->least[static_cast<std::size_t>(cell - row->cells.data())]; }

  // Tier t's cheapest after an insert of `price` or after an erase, and the cell's least with it: the least is
  // the least cheapest, so it is read only when a cheapest changes (an update of a run dearer than its tier's
  // cheapest leaves the least's cache line alone).
  void lower(std::size_t t, std::int64_t price) const {
    if (price >= cell->cheapest[t]) return;
    cell->cheapest[t] = price;
    std::int64_t& least = this->least();
    least = std::min(least, price);
  }
  void refresh(std::size_t t) const {
    const RunSet& set = cell->by_tier[t];
    const std::int64_t now = set.empty() ? RunCell::kNoRun : set.begin()->effective.value;
    if (now == cell->cheapest[t]) return;
    cell->cheapest[t] = now;
    least() = *std::min_element(cell->cheapest.begin(), cell->cheapest.end());
  }
};

// A pool's verdict for the current walk, by the pool's number in the index, in one 8-byte word (the scan reads
// one per run entry; a walk number and two bools took 16): the walk's number times 4, plus kOk when the pool
// admits the bid and kOwn when its provider (every ask's account) is the bid's.
struct RunPoolMark {
  static constexpr std::uint64_t kOk = 1;
  static constexpr std::uint64_t kOwn = 2;
  static constexpr std::uint64_t kFlags = kOk | kOwn;
  std::uint64_t word{0};  // 0: judged in no walk (walk numbers start at 1)
};

struct RunIndex {
  std::int64_t first_week{0};
  std::vector<RunRow> rows;  // rows[r].cells[c]: see above
  std::vector<const LivePool*> pools;      // by number (LivePool::run_number), never shrunk
  std::vector<RunPoolMark> marks;          // parallel to pools
  std::vector<std::uint8_t> region_bit_numbers;  // parallel to pools: region_bit_number of the pool's region
  std::size_t size{0};
  bool enabled{false};

  // The region_bit of an entry's pool.
  std::uint64_t region_of(const RunEntry& e) const { return std::uint64_t{1} << region_bit_numbers[e.pool]; }

  // The row of a run that starts at `start` (or of a window that starts then), and the cell in row r of one
  // that ends at `end`.
  std::size_t row_of(std::uint32_t start) const {
    return static_cast<std::size_t>(std::max<std::int64_t>(week_of(start) - first_week, 0));
  }
  std::size_t cell_of(std::size_t r, std::uint32_t end) const { return cell_at(r, end_week(end)); }
  // The same in two parts, for a scan of many rows: an end's week (run_slot) after first_week, computed once,
  // then its cell in row r.
  std::int64_t end_week(std::uint32_t end) const { return week_of(end) - first_week; }
  // run_slot of an index time, which is never negative: a division alone, without run_slot's branch for the sign.
  static std::int64_t week_of(std::uint32_t t) {
    return static_cast<std::int64_t>(t / static_cast<std::uint32_t>(kRunSlot));
  }
  // Whether two entries' runs start in the same week and end in the same week, so that they are in the same cell
  // (without finding it; entries in the edge cells may share one without this).
  static bool same_weeks(const RunEntry& x, const RunEntry& y) {
    return week_of(x.start) == week_of(y.start) && week_of(x.end) == week_of(y.end);
  }
  static std::size_t cell_at(std::size_t r, std::int64_t end_week) {
    const std::int64_t c = end_week - static_cast<std::int64_t>(r);
    return static_cast<std::size_t>(std::clamp<std::int64_t>(c, 0, static_cast<std::int64_t>(kRunCells) - 1));
  }
  // An entry's cell, added if need be (index_run); find and find_cell: null if it has none (unindex_run,
  // check_invariants).
  RunCellRef cell_for(const RunEntry& e) {
    const std::size_t r = row_of(e.start);
    if (r >= rows.size()) rows.resize(r + 1);
    RunRow& row = rows[r];
    const std::size_t c = cell_of(r, e.end);
    if (c >= row.cells.size()) {
      row.cells.resize(c + 1);
      row.least.resize(c + 1, RunCell::kNoRun);
    }
    return {&row, &row.cells[c]};
  }
  RunCellRef find(const RunEntry& e) {
    const auto at = where(e);
    if (!at) return {};
    RunRow& row = rows[at->first];
    return {&row, &row.cells[at->second]};
  }
  const RunCell* find_cell(const RunEntry& e) const {
    const auto at = where(e);
    return at ? &rows[at->first].cells[at->second] : nullptr;
  }
  // An entry's row and cell, if it has a cell.
  std::optional<std::pair<std::size_t, std::size_t>> where(const RunEntry& e) const {
    const std::size_t r = row_of(e.start);
    if (r >= rows.size()) return std::nullopt;
    const std::size_t c = cell_of(r, e.end);
    if (c >= rows[r].cells.size()) return std::nullopt;
    return std::pair{r, c};
  }
};

struct Book {
  MarketSpec spec;
  bool halted{false};
  std::vector<BidGroup> bid_groups;       // resting bids, by constraint group (a group without users gives way)
  std::vector<int> free_groups;            // groups that had no users when listed (BidGroup::listed), each once
  std::map<std::string, int> group_index;  // constraint_key(rep) -> index in bid_groups
  int unconstrained_group{-1};             // the group of bids without constraints, once one rested
  // Interned constraint sets (RestRequest::cons) of bids that rested or walked (Impl::known_group), with their
  // group and its slot's `gen` (an entry of a freed slot is stale): held, so that an address is not reused for
  // other constraints while it is here (cleared when it grows past 4,096).
  struct CachedGroup {
    ConsRef cons;
    int group{-1};
    std::uint32_t gen{0};
  };
  mutable std::unordered_map<const BidConstraints*, CachedGroup> group_by_cons;
  void cache_group(const ConsRef& cons, int group) const {
    if (group_by_cons.size() >= 4096) group_by_cons.clear();
    group_by_cons.insert_or_assign(&*cons, CachedGroup{cons, group, bid_groups[static_cast<std::size_t>(group)].gen});
  }
  // The group cached for constraint set `c`, or -1.
  int cached_group(const BidConstraints* c) const {
    auto it = group_by_cons.find(c);
    if (it == group_by_cons.end() || bid_groups[static_cast<std::size_t>(it->second.group)].gen != it->second.gen) {
      return -1;
    }
    return it->second.group;
  }
  std::map<PoolId, const LivePool*> spot_pools;  // its spot pools not retired (Impl::pools never erases one)
  // Pools with resting asks (order irrelevant: walks merge by key), each with the lowest effective price
  // among them, so that a walk skips a pool priced out without touching it.
  std::vector<AskPool> ask_pools;
  // The bids' ceiling (Impl::bid_ceiling(): the greater of the two below): an ask priced above it crosses no
  // bid, and skips its walk (~6 in 7 asks of the plain bench). duration_ceiling is at least every resting
  // duration bid's price (hook raises it; an unbook at it makes it stale, and bid_ceiling() takes the best of
  // the duration sets' first keys again); fixed_ceiling every resting fixed-window bid's, raised by hook and
  // dropped only when none rests (their best is in every cell of every index: a pointer chase too slow to redo
  // at each stale mark, measured in the realistic bench's tail).
  mutable Price duration_ceiling{std::numeric_limits<std::int64_t>::min()};
  mutable bool duration_ceiling_stale{false};
  Price fixed_ceiling{std::numeric_limits<std::int64_t>::min()};
  std::int64_t fixed_bids{0};  // resting
  // The ask pools with spot asks by their cheapest (Impl::set_spot_cheapest keeps it): a duration bid's walk
  // reads the pools priced within its limit and stops at the first above (it read every ask pool, ~272 a walk
  // in the realistic bench, three in four priced out), and one priced below the first crosses no ask.
  std::vector<SpotPool> spot_by_price;
  mutable RunIndex free_runs;  // every run of every resting ask, for fixed-window bids (built by a walk)
  mutable std::uint32_t pools_numbered{0};  // LivePool::book_number given so far
  // Bumped when group_for makes a group or gives a slot to another constraint set: the pools' lists of the
  // groups they may satisfy (LivePool::groups_ok) are then out of date.
  std::uint64_t groups_made{1};
  // The slots of the latest groups made: the one made when groups_made went from m to m + 1 at
  // made_slots[m % kMadeSlots]. A pool's list a few groups behind is brought up to date by judging those
  // groups alone (Impl::groups_of).
  static constexpr std::uint64_t kMadeSlots = 16;
  std::array<std::uint32_t, kMadeSlots> made_slots{};
  const MarketId* key{nullptr};  // its key in Impl::books (a std::map: the address is stable)
};

inline const MarketId* RestOrder::market() const { return book->key; }

// The key of a bid's constraint group: every constraint but its regions, serialized.
std::string constraint_key(const BidConstraints& c) {
  std::string k;
  for (Tier t : c.tiers) k += static_cast<char>('a' + static_cast<int>(t));
  k += '|';
  const auto num = [&](bool has, std::int64_t v) {
    k += has ? std::to_string(v) : std::string("-");
    k += ',';
  };
  num(c.min_fabric.has_value(), c.min_fabric ? static_cast<std::int64_t>(*c.min_fabric) : 0);
  num(c.min_fabric_gbps.has_value(), c.min_fabric_gbps.value_or(0));
  num(c.min_sla_pct_x1000.has_value(), c.min_sla_pct_x1000.value_or(0));
  num(c.max_pue_x1000.has_value(), c.max_pue_x1000.value_or(0));
  num(c.min_renewable_pct_x100.has_value(), c.min_renewable_pct_x100.value_or(0));
  num(c.max_carbon_g_per_kwh_x100.has_value(), c.max_carbon_g_per_kwh_x100.value_or(0));
  k += c.nvlink ? 'n' : '-';
  k += c.green_only ? 'g' : '-';
  k += c.single_pool ? 's' : '-';
  k += c.interruptible ? 'i' : '-';
  return k;
}

// An ask's runs (for_each_run's: the maximal stretches of its window with at least a lot free), in time order.
using Runs = std::vector<std::pair<Seconds, Seconds>>;

// True when [ws, we) (ws < we) lies in one of `runs`.
inline bool in_runs(const Runs& runs, Seconds ws, Seconds we) {
  for (const auto& [from, to] : runs) {  // in time order: the first that ends after ws is the only one
    if (ws < to) return from <= ws && we <= to;
  }
  return false;
}

// The resting bids an ask's window can hold (`fits`, given the ask's start, end and min_duration and the time
// `now`: every key returned fits) priced at `floor` or more, in one priority order (BidOrder): the fixed-window
// bids of the BidIndexes the caller adds (add_fixed; the keys returned for them carry no id: callers read the
// order through `lo`) merged with the duration bid sets' (add), each in a k-way merge of heads. A duration
// head skips the bids out of window in its set's contiguous chunks before it goes back into its heap; given the
// ask's runs, the fixed-window bids are read lazily (serve()). Each head is advanced before its key is returned
// (a fixed-window cursor at the next call), so the caller may erase or re-insert the key it was just given: the
// head is re-sought by the key it was at.
class BidWalk {
 public:
  struct Head {
    const BidSet* s{nullptr};
    BidSet::const_iterator it;
    BidKey key;  // *it once settled, kept to re-seek after the set changed
    std::uint64_t version{0};
  };
  // A place in one cell (of start week `start_week`, end week `end_week`) of a BidIndex: `at` in chunk `chunk`,
  // valid while the index's version is `version`; else re-sought by `entry` (the one at `at` once settled).
  struct Cursor {
    // On the first entry of `cell` (of start week `start_week`) of `ix`, to be judged against `served`.
    Cursor(const BidIndex& index, std::int64_t cell_start_week, const BidCell& cell, std::uint64_t runs_served)
        : ix(&index),
          version(index.version),
          chunk(cell.bids.chunks().data()),
          chunks_end(chunk + cell.bids.chunks().size()),
          at(chunk->data()),
          start_week(cell_start_week),
          end_week(cell.end_week),
          served(runs_served) {}
    BidEntry entry;
    const BidIndex* ix{nullptr};
    std::uint64_t version{0};
    const std::vector<BidEntry>* chunk{nullptr};
    const std::vector<BidEntry>* chunks_end{nullptr};
    const BidEntry* at{nullptr};
    std::int64_t start_week{0};
    std::int64_t end_week{0};
    std::uint64_t served{0};  // the runs' generation `entry` was judged against (0: to be judged again)
    bool taken{false};        // `entry` was returned: the cursor moves on past it
  };
  // A cell that make_cursors found priced in and open, not read yet (a cursor is made on it only once it could
  // hold the least: its `best` bounds the price of every entry it holds, as a walk only takes entries out of an
  // index). `cell` is valid while the index's version is `version`; else found again by its weeks.
  struct Unread {
    std::int64_t best;
    const BidIndex* ix{nullptr};
    const BidCell* cell{nullptr};
    std::uint64_t version{0};
    std::int64_t start_week{0};
    std::int64_t end_week{0};
  };
  // A walk's vectors, the caller's, reused from walk to walk (fresh ones were a malloc and a free a walk).
  struct Lists {
    std::vector<BidEntry> fixed;
    std::vector<Head> heads;
    std::vector<Cursor> cursors;
    std::vector<Unread> unread;
    std::vector<const BidIndex*> indexes;
  };
  BidWalk(Seconds a_start, Seconds a_end, Seconds a_min_duration, Seconds now, Lists& lists)
      : from_(std::max(a_start, now)), to_(a_end), min_(a_min_duration), now_(now), from_week_(run_slot(from_)),
        to_week_(run_slot(to_)), heads_(lists.heads),
        fixed_(lists.fixed), cursors_(lists.cursors), unread_(lists.unread), indexes_(lists.indexes) {
    heads_.clear();
    fixed_.clear();
    cursors_.clear();
    unread_.clear();
    indexes_.clear();
  }
  // Given the ask's runs (before the bids are added; the caller's, kept alive, and given again each time the
  // caller takes them again, after a fill), the walk passes over the fixed-window bids whose window lies in
  // none of them: the ask cannot serve those (a window has a lot free throughout exactly when it lies in one
  // run). It then reads them lazily: first the least alone, by one pass that keeps nothing (find_first), and
  // only if the caller asks for more, a cursor per index cell that a run may still hold (make_cursors), each
  // read only as far as the walk goes. An ask's walk usually takes one and fills, and then has no lot left for
  // the others (~24 that fit a walk in the realistic bench), which a gather of them all and their sort paid
  // for. Runs only shrink during a walk, so a bid passed over is never wanted again.
  void serve(const Runs* runs) {
    runs_ = runs;
    ++served_;
  }
  // The fixed-window bids of `ix` whose window fits, priced at `floor` or more (the same floor for every set of
  // a walk): given runs, read by next(), else gathered now (start() sorts them).
  void add_fixed(const BidIndex& ix, Price floor) {
    floor_ = floor;
    if (ix.best < floor.value || to_ <= from_) return;
    if (runs_) {
      indexes_.push_back(&ix);
      return;
    }
    for_each_cell(ix, floor_.value, false, [&](std::int64_t start_week, const BidCell& cell) {
      for (Cursor c(ix, start_week, cell, served_); settle(c); ++c.at) fixed_.push_back(c.entry);
    });
  }
  // Duration sets whose best bid is below `floor` are left out.
  void add(const BidSet& s, Price floor) {
    floor_ = floor;
    if (s.empty() || s.begin()->price < floor) return;
    Head h{&s, s.begin(), {}, 0};
    if (settle(h)) heads_.push_back(h);
  }
  void start() {
    std::sort(fixed_.begin(), fixed_.end(), before<BidEntry, BidEntry>);
    if (!indexes_.empty()) find_first();
    std::make_heap(heads_.begin(), heads_.end(), later);
  }
  std::optional<BidKey> next() {
    // The duration head that gave the last key usually gives the next one too: while its key is not after
    // the heap's least, it is taken without a push and a pop.
    if (pending_ && !reseek(*pending_)) pending_.reset();
    if (pending_ && !heads_.empty() && later(*pending_, heads_.front())) restore_pending();
    const Head* d = pending_ ? &*pending_ : heads_.empty() ? nullptr : &heads_.front();
    const BidEntry* f = nullptr;
    std::size_t least = 0;
    if (runs_) {
      if (has_first_ && first_served_ != served_ && !in_runs(*runs_, first_.start, first_.end)) has_first_ = false;
      first_served_ = served_;
      if (!has_first_ && !indexes_.empty()) make_cursors();
      if (has_first_) {
        f = &first_;
      } else {
        least = least_cursor();
        if (least < cursors_.size()) f = &cursors_[least].entry;
      }
    } else if (fpos_ < fixed_.size()) {
      f = &fixed_[fpos_];
    }
    if (f && (!d || before(*f, d->key))) {
      const BidKey k{f->price, f->priority, OrderId(), f->lo, f->start, f->end, Seconds(0)};
      if (has_first_) {
        has_first_ = false;  // the cursors start after it, at the next call
      } else if (runs_) {
        // Moved on at the next call, once the caller's fill has left the runs that judge the next entry.
        cursors_[least].taken = true;
        cursors_[least].served = 0;
      } else {
        ++fpos_;
      }
      return k;
    }
    if (!d) return std::nullopt;
    if (pending_) {
      Head& h = *pending_;
      const BidKey k = h.key;
      ++h.it;
      if (!settle(h)) pending_.reset();
      return k;
    }
    std::pop_heap(heads_.begin(), heads_.end(), later);
    Head h = heads_.back();
    heads_.pop_back();
    const BidKey k = h.key;
    ++h.it;
    if (settle(h)) pending_ = h;
    return k;
  }
  // Leaves the duration bids out from here on.
  void drop_duration() {
    pending_.reset();
    heads_.clear();
  }

 private:
  // Whether the ask's window holds the bid's: [ws, we) (a duration bid's from now) inside [max(a_start, now),
  // a_end), non-empty and at least a_min_duration long.
  bool fits(const BidKey& b) const {
    const Seconds ws = b.start_at(now_);
    const Seconds we = b.end_at(now_);
    return ws >= from_ && we <= to_ && we > ws && we - ws >= min_;
  }
  // Moves h to its next key that fits, priced at floor_ or more; false when it has none.
  bool settle(Head& h) const {
    for (const auto end = h.s->end(); h.it != end; ++h.it) {
      if (h.it->price < floor_) return false;
      if (fits(*h.it)) {
        h.key = *h.it;
        h.version = h.s->version();
        return true;
      }
    }
    return false;
  }
  // Whether the ask's window holds a fixed-window bid's and (given runs) a run does.
  bool holds(const BidEntry& e) const {
    return e.start >= from_ && e.end <= to_ && e.end > e.start && e.end - e.start >= min_ &&
           (!runs_ || in_runs(*runs_, e.start, e.end));
  }
  // Moves c to its cell's next entry (from `at` on) that the walk holds, priced at floor_ or more; false when it
  // has none.
  bool settle(Cursor& c) const {
    for (;;) {
      if (c.at == c.chunk->data() + c.chunk->size()) {
        if (++c.chunk == c.chunks_end) return false;
        c.at = c.chunk->data();
      }
      const BidEntry& e = *c.at;
      if (e.price < floor_) return false;
      if (holds(e)) {
        c.entry = e;
        c.served = served_;
        return true;
      }
      ++c.at;
    }
  }
  // Calls fn(start week, cell) for the cells of ix whose start week is not before the window's start's and
  // whose end week is not after its end's, and whose best price is `least` (at least floor_) or more; if `open`,
  // only those a run may still hold a window of (cell_open): a cell's windows start within its start week and end
  // within its end week, so a row's cells end in a week where the last run that starts before the row's week
  // ends still reaches (runs are disjoint and in time order). A fill's window usually takes whole cells out.
  // `least` is read again after each fn call, which may raise it (find_first). The rows and cells are read
  // through pointers taken once: fn's writes to the walk would otherwise make the compiler load each vector's
  // bounds again.
  template <class F>
  void for_each_cell(const BidIndex& ix, const std::int64_t& least, bool open, F&& fn) const {
    const std::int64_t last = to_week_;
    std::int64_t reach = open ? kNoBid : last;
    auto run = runs_ ? runs_->begin() : Runs::const_iterator();
    const BidRow* const rows_end = ix.rows.data() + ix.rows.size();
    for (const BidRow* row = ix.rows.data() + (ix.row_from(from_week_) - ix.rows.begin());
         row != rows_end && row->start_week <= last; ++row) {
      if (open) {
        for (; run != runs_->end() && run->first.value < (row->start_week + 1) * kRunSlot; ++run) {
          reach = std::min(last, run_slot(run->second));
        }
      }
      // No run reaches this row's cells (a cell ends in or after its row's start week), nor, with no run left to
      // start, a later row's (~1 row in 7 that make_cursors reads in the realistic bench). Only when `open` (else
      // reach is the window's last week, which the loop stops after); asked here, outside the `if (open)`, it
      // measured 0.3 % fewer realistic instructions than inside it (the compiler's layout).
      if (reach < row->start_week) {
        if (run == runs_->end()) break;
        continue;
      }
      if (row->best < least) continue;
      const BidCell* const cells_end = row->cells.data() + row->cells.size();
      for (const BidCell* cell = row->cells.data(); cell != cells_end; ++cell) {
        if (cell->end_week > reach) break;
        if (cell->best >= least) fn(row->start_week, *cell);
      }
    }
  }
  // Whether a run may hold a window of the cell of (start_week, end_week): one that starts before the start
  // week's end and ends in or after the end week.
  bool cell_open(std::int64_t start_week, std::int64_t end_week) const {
    const std::int64_t starts_before = (start_week + 1) * kRunSlot;
    const std::int64_t ends_from = end_week * kRunSlot;
    for (const auto& [from, to] : *runs_) {
      if (from.value >= starts_before) return false;
      if (to.value >= ends_from) return true;
    }
    return false;
  }
  // The least fixed-window bid a run holds, into first_ (has_first_), without a cursor: in each cell the first
  // entry that fits and lies in a run, the least of those; cells and indexes whose best price is below the least
  // so far are passed over. An ask's walk usually takes it, fills, and then has no lot left for the others.
  void find_first() {
    const auto take = [&](std::int64_t, const BidCell& cell) {
      for (const std::vector<BidEntry>& chunk : cell.bids.chunks()) {
        for (const BidEntry& e : chunk) {
          if (e.price < floor_ ||
              (has_first_ && (e.price < first_.price || (e.price == first_.price && e.priority > first_.priority)))) {
            return;
          }
          if (!holds(e) || (has_first_ && !before(e, first_))) continue;
          first_ = e;
          has_first_ = true;
          return;
        }
      }
    };
    // The least price a cell must reach to hold a bid before first_ (raised as first_ is found).
    std::int64_t least = floor_.value;
    const auto take_and_raise = [&](std::int64_t start_week, const BidCell& cell) {
      take(start_week, cell);
      if (has_first_) least = std::max(least, first_.price.value);
    };
    for (const BidIndex* ix : indexes_) {
      if (ix->best >= least) for_each_cell(*ix, least, false, take_and_raise);
    }
    first_served_ = served_;
    if (!has_first_) indexes_.clear();  // none in the runs, and runs only shrink
  }
  // Once the first (find_first's) is taken or out of the runs: each cell that may still hold a bid after it in a
  // run, unread. least_cursor reads a cell (makes and settles its cursor) only once its best could come before
  // the least so far: most are read after the walk's first fills, when the runs left hold none of their windows
  // (cell_open, no entry read), where a cursor settled here was brought up to date after each fill, then dropped.
  void make_cursors() {
    for (const BidIndex* ix : indexes_) {
      for_each_cell(*ix, floor_.value, true, [&](std::int64_t start_week, const BidCell& cell) {
        unread_.push_back(Unread{cell.best, ix, &cell, ix->version, start_week, cell.end_week});
      });
    }
    indexes_.clear();
  }
  // A cursor on cell u (found again if its index changed), settled on its first entry after first_ that a run
  // holds; false (no cursor) when it has none. Those before first_ were not in the runs at find_first, and runs
  // only shrink during a walk.
  bool read(const Unread& u) {
    if (!cell_open(u.start_week, u.end_week)) return false;
    const BidCell* cell = u.cell;
    if (u.version != u.ix->version) {
      cell = u.ix->find(u.start_week, u.end_week).second;
      if (!cell) return false;
    }
    // Built in its place (a cursor is 120 bytes; built aside and pushed, it was written twice) and dropped
    // again when its cell holds nothing after first_.
    Cursor& c = cursors_.emplace_back(*u.ix, u.start_week, *cell, served_);
    bool held = settle(c);
    for (; held && !before(first_, c.entry); held = settle(c)) ++c.at;
    if (!held) cursors_.pop_back();
    return held;
  }
  // The place of the least cursor (cursors_.size() if none is left), each brought up to date first: the runs
  // changed since its entry was judged, on to its next entry a run holds (or out, if none). A linear pass: a walk
  // has ~10 cursors and takes one or two keys (realistic bench), less than a heap's upkeep.
  std::size_t least_cursor() {
    constexpr std::size_t kNone = std::numeric_limits<std::size_t>::max();
    std::size_t least = kNone;
    for (std::size_t i = 0; i < cursors_.size();) {
      Cursor& c = cursors_[i];
      if (c.served != served_) {
        if ((c.taken || c.version != c.ix->version || !in_runs(*runs_, c.entry.start, c.entry.end)) && !advance(c)) {
          c = cursors_.back();
          cursors_.pop_back();
          continue;
        }
        c.served = served_;
      }
      if (least == kNone || before(c.entry, cursors_[least].entry)) least = i;
      ++i;
    }
    // The unread cells whose best may come before the least so far (an equal price may, by priority): read, and
    // out of the list (the last one takes its place: the others are not moved). Through pointers of its own, the
    // list cut to the end one once at the end: read() writes cursors_, so the compiler loaded unread_'s bounds
    // again and divided out its size for every cell passed over (14 instructions each, ~150,000 of them in the
    // realistic bench's 20,000 commands; 8 with an index and a count, 5 by pointers).
    std::int64_t bar = least == kNone ? kNoBid : cursors_[least].entry.price.value;
    Unread* u = unread_.data();
    Unread* end = u + unread_.size();
    while (u != end) {
      if (u->best < bar) {
        ++u;
        continue;
      }
      const Unread cell = *u;
      *u = *--end;
      if (read(cell) && (least == kNone || before(cursors_.back().entry, cursors_[least].entry))) {
        least = cursors_.size() - 1;
        bar = cursors_[least].entry.price.value;
      }
    }
    unread_.resize(static_cast<std::size_t>(end - unread_.data()));
    return least == kNone ? cursors_.size() : least;
  }
  // Settles c from its entry (from the one after it if it was taken), re-sought first if its index changed
  // since; false when its cell has no entry left that a run can hold. Whether a run may still hold the cell is
  // asked before the re-seek (it reads only the cursor's weeks and the runs): a fill usually takes the run
  // that held a cursor's cell, whose index the fill's erase changed too, and the cursor is dropped unsought.
  bool advance(Cursor& c) const {
    if (!cell_open(c.start_week, c.end_week)) return false;
    if (c.version != c.ix->version && !reseek(c)) return false;
    if (c.taken) {
      if (*c.at == c.entry) ++c.at;
      c.taken = false;
    }
    return settle(c);
  }
  // After the caller changed c's index: back to the entry it was at (or the next), through the cell that holds
  // it (cells shift in their row when one empties); false when the cell is gone.
  static bool reseek(Cursor& c) {
    const auto [row, cell] = c.ix->find(run_slot(c.entry.start), run_slot(c.entry.end));
    c.version = c.ix->version;
    if (!cell) return false;
    const auto it = cell->bids.lower_bound(c.entry);
    if (it == cell->bids.end()) return false;
    const auto& chunks = cell->bids.chunks();
    c.chunk = chunks.data() + it.chunk();
    c.chunks_end = chunks.data() + chunks.size();
    c.at = c.chunk->data() + it.index();
    return true;
  }
  // After the caller changed h's set: back to the key it was at (or the next that fits).
  bool reseek(Head& h) const {
    if (h.version == h.s->version()) return true;
    h.it = h.s->lower_bound(h.key);
    return settle(h);
  }
  void restore_pending() {
    if (!pending_) return;
    if (reseek(*pending_)) {
      heads_.push_back(*pending_);
      std::push_heap(heads_.begin(), heads_.end(), later);
    }
    pending_.reset();
  }
  // BidOrder, with a key's id read from its order (a fixed candidate carries none) when the prices and
  // priorities tie.
  template <class X, class Y>
  static bool before(const X& x, const Y& y) {
    if (x.price != y.price) return x.price > y.price;
    if (x.priority != y.priority) return x.priority < y.priority;
    return x.lo->o.id < y.lo->o.id;
  }
  static bool later(const Head& x, const Head& y) { return BidOrder{}(y.key, x.key); }  // min-heap
  Seconds from_;
  Seconds to_;
  Seconds min_;
  Seconds now_;
  // The window's weeks (run_slot of from_ and to_), which for_each_cell reads for each index and pass: computed
  // once a walk instead of two divisions a call.
  std::int64_t from_week_;
  std::int64_t to_week_;
  Price floor_;
  std::vector<Head>& heads_;
  std::optional<Head> pending_;
  std::vector<BidEntry>& fixed_;  // without runs: the fixed-window candidates, sorted by start()
  std::size_t fpos_{0};
  std::vector<Cursor>& cursors_;  // given runs, in no order
  std::vector<Unread>& unread_;   // given runs: the cells make_cursors found and least_cursor did not read yet
  std::vector<const BidIndex*>& indexes_;  // given runs: those find_first and make_cursors read
  BidEntry first_{};
  bool has_first_{false};  // first_ is find_first's, not taken yet
  std::uint64_t first_served_{0};  // the runs' generation first_ was judged against
  const Runs* runs_{nullptr};
  std::uint64_t served_{0};  // bumped by serve()
};

// A view's levels by price, unordered: the engine only changes one level at a time and reports its new total
// (a hash probe, not a tree descent); depth() sorts them when asked. An open-addressing table of (price, GPUs)
// with linear probing (slot by a multiplicative hash of the price): a lookup is a multiply, a shift and most
// often one compare, where std::unordered_map's was a division and a node to follow (~25 instructions), and a
// level that appears or goes allocates and frees nothing (plain -1.0 % instructions, bench/README.md "session 21:
// plain"). A level's GPUs are never 0 (view_add erases a level its change empties), so 0 marks an empty slot. At
// most 3/4 full; it doubles, and never shrinks (a view's levels come and go).
class Levels {
 public:
  struct Entry {
    Price price;
    Qty qty;  // 0: an empty slot
  };
  Levels() = default;
  Levels(const Levels&) = default;
  Levels& operator=(const Levels&) = default;
  // A moved-from table is empty (the defaults would leave its count and shift beside no slots).
  Levels(Levels&& o) noexcept
      : slots_(std::move(o.slots_)), size_(std::exchange(o.size_, 0)), shift_(std::exchange(o.shift_, 64U)) {
    o.slots_.clear();
  }
  Levels& operator=(Levels&& o) noexcept {
    slots_ = std::move(o.slots_);
    o.slots_.clear();
    size_ = std::exchange(o.size_, 0);
    shift_ = std::exchange(o.shift_, 64U);
    return *this;
  }

  // The level at `p` (null: none). Valid until the next insert or erase.
  Entry* find(Price p) { return const_cast<Entry*>(std::as_const(*this).find(p)); }
  const Entry* find(Price p) const {
    if (size_ == 0) return nullptr;
    for (std::size_t i = home(p);; i = (i + 1) & mask()) {
      const Entry& e = slots_[i];
      if (e.qty.value == 0) return nullptr;
      if (e.price == p) return &e;
    }
  }
  // Adds a level not there yet (q not 0).
  void insert(Price p, Qty q) {
    if ((size_ + 1) * 4 > slots_.size() * 3) grow();
    place(Entry{p, q});
    ++size_;
  }
  // Erases level `e` (from find()): the entries after it in its run that may take its slot move back, so that
  // every entry stays reachable from its home slot (no tombstones).
  void erase(Entry* e) {
    auto hole = static_cast<std::size_t>(e - slots_.data());
    for (std::size_t j = (hole + 1) & mask(); slots_[j].qty.value != 0; j = (j + 1) & mask()) {
      // j's entry may move to the hole unless its home slot is in (hole, j] (cyclically).
      if (((j - home(slots_[j].price)) & mask()) >= ((j - hole) & mask())) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Entry{};
    --size_;
  }
  // Adds `q` to the level at `p`, creating it, or erasing it when it comes to 0 (check_invariants' recount).
  void add(Price p, Qty q) {
    if (Entry* at = find(p)) {
      at->qty = at->qty + q;
      if (at->qty.value == 0) erase(at);
    } else if (q.value != 0) {
      insert(p, q);
    }
  }
  bool empty() const { return size_ == 0; }
  // Calls f(price, qty) for every level, in no order.
  template <class F>
  void for_each(F&& f) const {
    for (const Entry& e : slots_) {
      if (e.qty.value != 0) f(e.price, e.qty);
    }
  }
  // The same levels with the same GPUs (in any slots).
  bool operator==(const Levels& o) const {
    if (size_ != o.size_) return false;
    for (const Entry& e : slots_) {
      if (e.qty.value == 0) continue;
      const Entry* at = o.find(e.price);
      if (!at || at->qty != e.qty) return false;
    }
    return true;
  }

 private:
  std::size_t mask() const { return slots_.size() - 1; }
  std::size_t home(Price p) const {
    return static_cast<std::size_t>((static_cast<std::uint64_t>(p.value) * 0x9E3779B97F4A7C15ULL) >> shift_);
  }
  void place(const Entry& e) {
    std::size_t i = home(e.price);
    while (slots_[i].qty.value != 0) i = (i + 1) & mask();
    slots_[i] = e;
  }
  [[gnu::noinline]] void grow() {
    std::vector<Entry> old = std::move(slots_);
    const std::size_t n = old.empty() ? 8 : old.size() * 2;
    slots_.assign(n, Entry{});
    shift_ = 64 - static_cast<unsigned>(std::countr_zero(n));
    for (const Entry& e : old) {
      if (e.qty.value != 0) place(e);
    }
  }

  std::vector<Entry> slots_;  // a power of two of them, or none
  std::size_t size_{0};
  unsigned shift_{64};
};

struct View {
  std::uint64_t sequence{0};
  Levels bids;
  Levels asks;
  ConstrainedBids constrained;
};

// A level the command changed: its quantity before the command (recorded by the first change) and now.
struct LevelBefore {
  Side side{Side::buy};
  Price price;
  Qty qty;
  Qty now;
};

// A view the command changed. Impl keeps these in a vector reused from command to command (a command
// touches one view, rarely a few, and a handful of levels): no allocation once warm.
struct Touched {
  const MarketId* market{nullptr};  // a key of Impl::books
  Bucket bucket;
  std::vector<LevelBefore> before;  // one entry per level changed, in first-change order
  ConstrainedBids constrained_before;
  View* view{nullptr};  // its entry in Impl::views (a std::map: stable)
};

struct Account {
  Limits limits;
  bool custom{false};
  std::int64_t open_orders{0};
  std::int64_t open_gpus{0};
  Int128 notional_x3600{0};
  OrderList orders;  // open orders
};

struct Finished {
  Order order;
  std::uint64_t body_hash{0};
  Seq done_seq{0};
};

using CidKey = std::pair<AccountId, std::string>;

// A fill found by a dry-run walk.
struct PlannedFill {
  OrderId other;  // the ask (incoming bid) or bid (incoming ask); 0 for a preemption
  LeaseId lease;  // preemption: the lease preempted
  Qty qty;
  Seconds start{};
  Seconds end{};
  Price price;
};

struct PreemptCandidate {
  LeaseId lease;
  Qty max_qty;
  Qty lot;
  Seconds start{};
  Seconds end{};
  Price price;
  Price lease_price;
  // What a bid with `left` GPUs to go takes of it: as many as it can, in whole lots (0: it passes it over).
  Qty take(Qty left) const { return Qty(std::min(left.value, max_qty.value) / lot.value * lot.value); }
};

bool contains_tier(const std::vector<Tier>& v, Tier t) { return std::find(v.begin(), v.end(), t) != v.end(); }

}  // namespace

struct Engine::Impl {
  // Constraint sets shared by the orders that have them, by hash; unused ones (no ConsRef) are swept when
  // the table has doubled since the last sweep. Mutable: quote() builds a transient order too. First, so
  // that it outlives every order.
  mutable std::unordered_multimap<std::uint64_t, std::unique_ptr<InternedCons>> interned;
  mutable std::size_t sweep_at{1024};
  EngineConfig cfg;
  GreenPolicy policy;
  Seconds now{0};
  Seq last_seq{0};
  Seq seq{0};  // the command being applied
  std::int64_t next_trade{1};
  std::int64_t next_lease{1};
  std::map<MarketId, Book> books;
  OrderMap orders;  // open orders (terminal ones until the command ends)
  std::map<PoolId, LivePool> pools;
  IdIndex<LivePool> pool_index;  // pools' entries by id (add_pool): an order's pool found by a probe (find_pool)
  std::vector<LivePool*> pool_list;  // by LivePool::number, in the order they were added (never erased)
  SlabMap<LeaseId, LiveLease> leases;  // not ended (iteration in no order: leases_by_id() sorts)
  std::map<LeaseId, LeaseRare> rare_leases;  // of the leases in `leases` with LiveLease::kRare flags
  std::map<LeaseId, LeaseWide> wide_leases;  // of the leases in `leases` with LiveLease::kWide
  std::map<AccountId, Account> accounts;
  std::map<ViewKey, View> views;
  std::map<std::pair<const MarketId*, Bucket>, View*> view_of;  // views by interned market (no string compared)
  // view_of's entry touch() found last (views are never erased): most commands touch the view the one before did.
  std::pair<const MarketId*, Bucket> last_view_key{nullptr, Bucket{}};
  View* last_view{nullptr};
  std::vector<Touched> touched;  // the first n_touched are this command's (the rest kept for their buffers)
  std::size_t n_touched{0};
  Touched* last_touched{nullptr};  // touch()'s memory of the last view it returned
  TimerHeap timers;  // stale entries are skipped when they fire
  std::map<CidKey, OrderId> open_cids;
  std::map<CidKey, Finished> finished_cids;
  std::vector<LiveOrder*> dead;  // closed this command: erased at its end (addresses are stable until then)
  // Ask records of erased orders, reused with their room (a placement then allocates neither the record nor
  // its free capacity's array); at most kSpareAsks kept, so that a mass cancel does not hold its records.
  static constexpr std::size_t kSpareAsks = 4096;
  std::vector<Owned<AskSide>> spare_asks;
  EventSink* sink_{nullptr};
  mutable std::deque<Order> query_orders;  // Engine::order()'s answers, until the next apply()
  mutable std::deque<Lease> query_leases;  // Engine::lease()'s answers, until the next apply()
  // Set when either holds an answer: apply() reads one flag, not the two deques' ends (~8 instructions a command).
  mutable bool query_answers{false};

  explicit Impl(EngineConfig c) : cfg(std::move(c)), policy(cfg.policy) {
    for (const MarketSpec& m : cfg.markets) {
      auto& [key, book] = *books.try_emplace(m.id).first;
      book.spec = m;
      book.key = &key;
    }
  }

  // The sink's growth, out of line: as emplace_back's own (1, then doubling; the server's sink is a fresh
  // vector per command, kept until its commit).
  [[gnu::noinline]] void grow_sink() { sink_->reserve(std::max<std::size_t>(1, 2 * sink_->capacity())); }
  // Appends an event of type E built from `args` in the sink's variant (no temporary Event moved through the
  // variant's visitor). The room is made first, out of line, and GCC told there is room: vector's emplace_back
  // then keeps none of its reallocation inline, whose register saves every event paid for (an out-of-line
  // emplace_back per event type, saving six registers around the event's construction).
  template <class E, class... A>
  Event& push_event(A&&... args) {
    EventSink& s = *sink_;
    if (s.size() == s.capacity()) [[unlikely]] grow_sink();
    if (s.size() == s.capacity()) __builtin_unreachable();
    return s.emplace_back(std::in_place_type<E>, std::forward<A>(args)...);
  }

  template <class E>
  void emit(E&& e) {
    push_event<std::remove_cvref_t<E>>(std::forward<E>(e));
  }
  // The same with the event's members given: the event is initialized from them in the sink (no temporary
  // event moved in). Returns it, for the caller to finish.
  template <class E, class... A>
  E& emit_as(A&&... members) {
    return std::get<E>(push_event<E>(std::forward<A>(members)...));
  }

  // ---------------------------------------------------------------- compact orders

  // (`interned`, the constraint sets shared by the open orders, is Impl's first member: the orders' ConsRefs
  // are destroyed before it.)

  // The key of `interned` (only: never stored, nor compared across runs), a word a field combined as
  // boost::hash_combine does, a region by std::hash: FNV-1a's byte at a time was ~500 instructions a set (1.5 M in
  // the realistic bench's 20,000 commands).
  static std::uint64_t constraints_hash(const BidConstraints& c) {
    std::uint64_t h = 0;
    const auto add = [&](std::uint64_t v) { h ^= v + 0x9E3779B97F4A7C15ULL + (h << 6) + (h >> 2); };
    add(c.tiers.size());
    for (Tier t : c.tiers) add(static_cast<std::uint64_t>(t));
    add(c.regions.size());
    for (const std::string& r : c.regions) add(std::hash<std::string>{}(r));
    add(c.nvlink);
    add(static_cast<std::uint64_t>(c.min_fabric ? static_cast<std::int64_t>(*c.min_fabric) : -1));
    add(static_cast<std::uint64_t>(c.min_fabric_gbps.value_or(-1)));
    add(static_cast<std::uint64_t>(c.min_sla_pct_x1000.value_or(-1)));
    add(c.green_only);
    add(static_cast<std::uint64_t>(c.max_pue_x1000.value_or(-1)));
    add(static_cast<std::uint64_t>(c.min_renewable_pct_x100.value_or(-1)));
    add(static_cast<std::uint64_t>(c.max_carbon_g_per_kwh_x100.value_or(-1)));
    add(c.single_pool);
    add(c.interruptible);
    return h;
  }

  // The shared set equal to `c`; none (a null ConsRef) for no constraint at all (most bids, every ask), tested
  // here inline, field by field (cheaper than operator==); the table's probe out of line (intern_set): called
  // whole, every placement paid the call and the frame it sets up for the probe (~20 instructions).
  ConsRef intern(const BidConstraints& c) const {
    static_assert(sizeof(BidConstraints) == 104, "a new field of BidConstraints belongs in this test too");
    if (c.tiers.empty() && c.regions.empty() && !c.nvlink && !c.min_fabric && !c.min_fabric_gbps &&
        !c.min_sla_pct_x1000 && !c.green_only && !c.max_pue_x1000 && !c.min_renewable_pct_x100 &&
        !c.max_carbon_g_per_kwh_x100 && !c.single_pool && !c.interruptible) {
      return ConsRef();
    }
    return intern_set(c);
  }
  [[gnu::noinline]] ConsRef intern_set(const BidConstraints& c) const {
    const std::uint64_t h = constraints_hash(c);
    auto [first, last] = interned.equal_range(h);
    for (auto it = first; it != last; ++it) {
      if (it->second->c == c) return ConsRef(it->second.get());
    }
    if (interned.size() >= sweep_at) {
      std::erase_if(interned, [](const auto& e) { return e.second->refs == 0; });
      sweep_at = std::max<std::size_t>(1024, 2 * interned.size());
    }
    auto it = interned.emplace(h, std::make_unique<InternedCons>(InternedCons{c, 0, {}}));
    return ConsRef(it->second.get());
  }

  // The book of market `m` (`books`' nodes never move; Book::key is its interned id). Mutable access from
  // a const method: quote() builds a transient order that only reads its book.
  Book* book_of(const MarketId& m) const {
    auto it = books.find(m);
    if (it == books.end()) throw std::out_of_range("unknown market " + std::string(m.value()));
    return const_cast<Book*>(&it->second);
  }

  RestOrder rest_of(Order&& o) const { return rest_of(std::move(o), o.request, book_of(o.market)); }

  // The same from the order's request apart (`o.request` unused) and its market's book.
  RestOrder rest_of(Order&& o, const OrderRequest& q, Book* book) const {
    RestOrder r;
    rest_into(r, std::move(o), q, book);
    return r;
  }

  // Fills `r` (default-constructed) as rest_of() would return it.
  void rest_into(RestOrder& r, Order&& o, const OrderRequest& q, Book* book) const {
    // An open order's quantity and lot are within validate()'s bounds (kept as Qty32).
    if (!Qty32::holds(q.quantity) || !Qty32::holds(q.min_chunk)) {
      throw std::invalid_argument("order " + std::to_string(o.id.value) + ": quantity or min_chunk out of bounds");
    }
    request_into(r, q, book, o.body_hash, o.window_start, o.window_end);
    r.id = o.id;
    r.account = o.account;
    r.set_window(o.window_start, o.window_end);
    r.bucket = o.bucket;
    r.status = o.status;
    r.reason = o.reason;
    r.set_priority(o.priority);  // after the id, which it is kept relative to
    r.created_at = o.created_at;
    r.set_updated_at(o.updated_at);  // after created_at, which it is kept relative to
    // The side's own members only (they share storage); the others are 0 in every state this engine makes.
    if (r.is_buy() ? o.filled_gpu_seconds != 0 || o.free_gpu_seconds != 0
                   : o.filled.value != 0 || o.remaining.value != 0) {
      throw std::invalid_argument("order " + std::to_string(o.id.value) + ": GPUs and GPU-seconds of the other side");
    }
    if (r.is_buy()) {
      r.filled = o.filled;
      r.remaining = o.remaining;
    } else {
      r.filled_gpu_seconds = o.filled_gpu_seconds;
      r.free_gpu_seconds = o.free_gpu_seconds;
    }
    // A bid's ask record only when it has something to keep: a min_duration it sent, or what a snapshot gave it.
    if (r.is_sell() || o.total_gpu_seconds != 0 || o.lapsed_gpu_seconds != 0 || o.cancelled_gpu_seconds != 0 ||
        !o.free.empty() || o.green_discount_bps != 0 || o.effective_price != q.price || q.min_duration.value != 0) {
      // A sell's pool: mutable from a const method as book_of's book (pools' nodes never move).
      LivePool* pool = nullptr;
      if (r.is_sell()) {
        pool = find_pool(q.pool);
        if (!pool) throw std::out_of_range("order " + std::to_string(o.id.value) + ": unknown pool");
      }
      r.ask = Owned(std::make_unique<AskSide>(AskSide{.free = std::move(o.free),
                                                      .total_gpu_seconds = o.total_gpu_seconds,
                                                      .lapsed_gpu_seconds = o.lapsed_gpu_seconds,
                                                      .cancelled_gpu_seconds = o.cancelled_gpu_seconds,
                                                      .sold = {},
                                                      .pool = pool,
                                                      .pool_slot = 0,
                                                      .green_discount_bps = o.green_discount_bps,
                                                      .effective = o.effective_price,
                                                      .min_duration = q.min_duration}));
    }
  }

  // The request part of rest_into(): r.request and r.book from `q` and its market's book, and
  // the order's body hash; `window_start`, `window_end`: the order's (where its request's start and end are kept
  // when they are equal).
  // Inlined (always_inline; GCC kept it out of line: a call saving registers for each placement); the rare cold
  // part out of line (request_cold).
  [[gnu::always_inline]] void request_into(RestOrder& r, const OrderRequest& q, Book* book,
                                           std::uint64_t hash, Seconds window_start, Seconds window_end) const {
    RestRequest& rq = r.request;
    rq.side = q.side;
    rq.time_in_force = q.time_in_force;
    rq.stp = q.stp;
    rq.post_only = q.post_only;
    rq.price = q.price;
    rq.quantity = Qty32(q.quantity);
    rq.min_chunk = Qty32(q.min_chunk);
    if (q.start) rq.has |= RestRequest::kStart;
    if (q.start && *q.start != window_start) rq.has |= RestRequest::kColdStart;
    if (q.end) rq.has |= RestRequest::kEnd;
    if (q.end && *q.end != window_end) rq.has |= RestRequest::kColdEnd;
    const bool cold_duration =
        q.duration && static_cast<std::uint64_t>(q.duration->value) > std::numeric_limits<std::uint32_t>::max();
    if (q.duration) {
      rq.has |= cold_duration ? RestRequest::kDuration | RestRequest::kColdDuration : RestRequest::kDuration;
      if (!cold_duration) rq.duration_v = static_cast<std::uint32_t>(q.duration->value);
    }
    if (q.expire_at) rq.has |= RestRequest::kExpire;
    // What only a RestCold can hold: the expiry and whatever does not fit the compact fields.
    constexpr std::uint8_t kInCold =
        RestRequest::kExpire | RestRequest::kColdStart | RestRequest::kColdEnd | RestRequest::kColdDuration;
    rq.cons = intern(q.constraints);
    r.book = book;
    using MK = RestRequest::MarketKind;
    rq.market_kind = q.market.empty() ? MK::empty : q.market == *book->key ? MK::resolved : MK::cold;
    const bool buy_pool = q.pool.value != 0 && q.side == Side::buy;  // a sell's pool is never 0
    if (!q.client_order_id.empty() || rq.market_kind == MK::cold || (rq.has & kInCold) || hash != 0 || buy_pool) {
      request_cold(rq, q, hash, buy_pool);
    }
  }

  // The request's rare fields (RestCold), for request_into().
  [[gnu::noinline]] static void request_cold(RestRequest& rq, const OrderRequest& q, std::uint64_t hash,
                                             bool buy_pool) {
    auto cold = std::make_unique<RestCold>();
    cold->client_order_id = q.client_order_id;
    if (rq.market_kind == RestRequest::MarketKind::cold) cold->request_market = q.market;
    if (q.expire_at) cold->expire_at = *q.expire_at;
    if (rq.has & RestRequest::kColdDuration) cold->duration = *q.duration;
    if (rq.has & RestRequest::kColdStart) cold->start = *q.start;
    if (rq.has & RestRequest::kColdEnd) cold->end = *q.end;
    if (buy_pool) cold->pool = q.pool;
    cold->body_hash = hash;
    rq.cold = ColdRef(std::move(cold));
  }

  static Order to_order(const RestOrder& r) { return make_order(r); }

  // The live leases in id order (`leases` iterates in slot order).
  std::vector<const LiveLease*> leases_by_id() const {
    std::vector<const LiveLease*> out;
    out.reserve(leases.size());
    for (const LiveLease& l : leases) out.push_back(&l);
    std::sort(out.begin(), out.end(), [](const LiveLease* a, const LiveLease* b) { return a->id < b->id; });
    return out;
  }

  LivePool& pool_of(const LiveLease& l) const { return *pool_list[l.pool]; }
  // Pool `id`'s entry, numbered when new.
  LivePool& add_pool(PoolId id) {
    auto [it, added] = pools.try_emplace(id);
    LivePool& lp = it->second;
    if (added) {
      if (pool_list.size() > std::numeric_limits<std::uint32_t>::max()) throw std::length_error("too many pools");
      lp.p.id = id;
      lp.number = static_cast<std::uint32_t>(pool_list.size());
      pool_list.push_back(&lp);
      pool_index.insert(id.value, &lp);
    }
    return lp;
  }
  // Pool `id`'s entry, or null. Mutable from a const method, as book_of's book: the engine owns the pools and
  // their nodes never move.
  LivePool* find_pool(PoolId id) const {
    const IdIndex<LivePool>::Slot* e = pool_index.find(id.value);
    return e ? e->p : nullptr;
  }

  Lease to_lease(const LiveLease& l) const {
    const Pool& p = pool_of(l).p;
    const LeaseRare& rare = rare_for(l, LiveLease::kRare);  // one lookup for all of them (most leases have none)
    const LeaseWide& wide = wide_for(l);
    return Lease{.id = l.id,
                 .trade = l.trade(wide),
                 .split_from = rare.split_from,
                 .buyer = l.buyer(wide),
                 .provider = p.provider,
                 .pool = p.id,
                 .market = p.spec.market,
                 .buy_order = l.buy_order(wide),
                 .sell_order = l.sell_order,
                 .quantity = l.quantity,
                 .start = l.start,
                 .end = l.end,
                 .price = l.price,
                 .list_price = l.list_price(wide),
                 .green_discount_bps = l.green_discount_bps(wide),
                 .interruptible = l.interruptible,
                 .status = l.status,
                 .preempted_at = (l.has & LiveLease::kPreemptedAt) ? std::optional(rare.preempted_at) : std::nullopt,
                 .ends_at = (l.has & LiveLease::kEndsAt) ? std::optional(l.ends_at(rare)) : std::nullopt,
                 .billed = l.ended ? l.amount : 0,
                 .owed = l.owed(),
                 .bucket = l.bucket(wide),
                 .ended = l.ended,
                 .ask_window_start = l.ask_window_start(rare),
                 .ask_window_end = l.ask_window_end(rare),
                 .ask_list_price = l.ask_list_price(rare, wide),
                 .ask_min_chunk = l.ask_min_chunk(rare),
                 .ask_min_duration = l.ask_min_duration(rare),
                 .ask_withdrawn = l.ask_withdrawn()};
  }

  // A LeaseChanged built in place, as emit_order's events (the Lease straight into the event).
  struct LeaseOf {
    const Impl& impl;
    const LiveLease& l;
    operator Lease() const { return impl.to_lease(l); }  // NOLINT(google-explicit-constructor): by design
  };
  void emit_lease(const LiveLease& l) { push_event<LeaseChanged>(LeaseOf{*this, l}); }

  void set_preempted_at(LiveLease& l, Seconds t) {
    rare_leases[l.id].preempted_at = t;
    l.has |= LiveLease::kPreemptedAt;
  }
  void set_split_from(LiveLease& l, LeaseId from) {
    rare_leases[l.id].split_from = from;
    l.has |= LiveLease::kSplitFrom;
  }
  // A lease's fields that may be kept apart (LiveLease).
  // l's entry in rare_leases when it has one of `bits` (no lookup otherwise), else an empty one.
  const LeaseRare& rare_for(const LiveLease& l, std::uint8_t bits) const {
    return (l.has & bits) ? rare_leases.at(l.id) : kNoLeaseRare;
  }
  Seconds ends_at(const LiveLease& l) const { return l.ends_at(rare_for(l, LiveLease::kRareEndsAt)); }
  const LeaseWide& wide_for(const LiveLease& l) const {
    return (l.has & LiveLease::kWide) ? wide_leases.at(l.id) : kNoLeaseWide;
  }
  AccountId buyer(const LiveLease& l) const { return l.buyer(wide_for(l)); }
  Price ask_list_price(const LiveLease& l) const {
    return l.ask_list_price(rare_for(l, LiveLease::kRareAskPrice), wide_for(l));
  }
  // The list price a preemption of `l` starts from ("the ask's effective price"), and its trade's list_price:
  // the ask's own while it is open (an amend may have re-priced it since it sold `l`), else the one it ended with.
  Price preemption_list_price(const LiveLease& l) const {
    auto live = orders.find(l.sell_order);
    return live != orders.end() && live->o.is_open() ? live->o.request.price : ask_list_price(l);
  }
  Seconds ask_window_start(const LiveLease& l) const { return l.ask_window_start(rare_for(l, LiveLease::kRareAskTerms)); }
  Seconds ask_window_end(const LiveLease& l) const { return l.ask_window_end(rare_for(l, LiveLease::kRareAskTerms)); }
  Seconds ask_min_duration(const LiveLease& l) const { return l.ask_min_duration(rare_for(l, LiveLease::kRareAskTerms)); }
  Qty ask_min_chunk(const LiveLease& l) const { return l.ask_min_chunk(rare_for(l, LiveLease::kRareAskTerms)); }

  // Sets (`apart`) or clears flag `bit` of l's rare fields; the entry goes with the last of them.
  void set_rare(LiveLease& l, std::uint8_t bit, bool apart) {
    if (apart) {
      l.has |= bit;
    } else if (l.has & bit) {
      l.has &= static_cast<std::uint8_t>(~bit);
      if (!(l.has & LiveLease::kRare)) rare_leases.erase(l.id);
    }
  }
  void set_ends_at(LiveLease& l, Seconds t) {
    l.has |= LiveLease::kEndsAt;
    if (t != l.end) rare_leases[l.id].ends_at = t;
    set_rare(l, LiveLease::kRareEndsAt, t != l.end);
  }
  void set_ask_list_price(LiveLease& l, Price p) {
    const bool apart = p != l.list_price(wide_for(l));
    if (apart) rare_leases[l.id].ask_list_price = p;
    set_rare(l, LiveLease::kRareAskPrice, apart);
  }
  // The fields l keeps of its trade, with its id, sell order and price already set: as offsets when all of them
  // fit, else all whole in wide_leases. Inline: GCC left it out of line, a call a lease (plain 0.50 M).
  [[gnu::always_inline]] void set_trade_fields(LiveLease& l, AccountId buyer, TradeId trade, OrderId buy_order,
                                               Price list_price, std::int32_t green_bps, Bucket bucket) {
    std::int64_t lag = 0;
    std::int64_t buy = 0;
    std::int64_t list = 0;
    std::uint16_t month = 0;
    // The differences as int64 when they do not overflow (then they are exact), and in their fields' ranges.
    const bool fits = std::in_range<std::uint32_t>(buyer.value) &&
                      !__builtin_sub_overflow(l.id.value, trade.value, &lag) &&
                      !__builtin_sub_overflow(buy_order.value, l.sell_order.value, &buy) &&
                      !__builtin_sub_overflow(list_price.value, l.price.value, &list) &&
                      std::in_range<std::uint32_t>(lag) && std::in_range<std::int32_t>(buy) &&
                      std::in_range<std::int32_t>(list) && std::in_range<std::int16_t>(green_bps) &&
                      LiveLease::month_code_of(bucket, month);
    if (fits) [[likely]] {
      l.buyer_ = static_cast<std::uint32_t>(buyer.value);
      l.trade_lag = static_cast<std::uint32_t>(lag);
      l.buy_offset = static_cast<std::int32_t>(buy);
      l.list_offset = static_cast<std::int32_t>(list);
      l.green_bps = static_cast<std::int16_t>(green_bps);
      l.month_code = month;
    } else {
      wide_leases[l.id] = LeaseWide{buyer, trade, buy_order, list_price, green_bps, bucket};
      l.has |= LiveLease::kWide;
    }
  }
  // The ask's window [ws, we), min_duration `md` and min_chunk `lot` (at most kMaxQuantity), with l's own window
  // already set.
  void set_ask_terms(LiveLease& l, Seconds ws, Seconds we, Seconds md, Qty lot) {
    constexpr std::int64_t kU32 = std::numeric_limits<std::uint32_t>::max();
    const std::int64_t lead = (l.start - ws).value;
    const std::int64_t tail = (we - l.end).value;
    const bool fits = lead >= 0 && lead <= kU32 && tail >= 0 && tail <= kU32 &&
                      std::in_range<std::uint16_t>(md.value) && std::in_range<std::uint16_t>(lot.value);
    if (fits) {
      l.ask_lead = static_cast<std::uint32_t>(lead);
      l.ask_tail = static_cast<std::uint32_t>(tail);
      l.ask_min_duration_ = static_cast<std::uint16_t>(md.value);
      l.ask_min_chunk_ = static_cast<std::uint16_t>(lot.value);
    } else {
      LeaseRare& r = rare_leases[l.id];
      r.ask_window_start = ws;
      r.ask_window_end = we;
      r.ask_min_duration = md;
      r.ask_min_chunk = Qty32(lot);
    }
    set_rare(l, LiveLease::kRareAskTerms, !fits);
  }

  // Erases lease `id` (`l`) from `leases`, with what it kept apart.
  void erase_lease(LeaseId id, const LiveLease& l) {
    if (l.has & LiveLease::kRare) rare_leases.erase(id);
    if (l.has & LiveLease::kWide) wide_leases.erase(id);
    leases.erase(id);
  }

  // A new ask's record: `qty` GPUs free over [from, to), nothing lapsed, cancelled or sold; a spare one
  // when there is one. A new one is made empty in place and then set as a spare one is (it was moved from a
  // temporary AskSide, destroyed after: plain -0.44 % instructions, session 23).
  Owned<AskSide> new_ask_side(Seconds from, Seconds to, Qty qty, std::int64_t total) {
    Owned<AskSide> a;
    if (spare_asks.empty()) {
      a = Owned(std::make_unique<AskSide>());
    } else {
      a = std::move(spare_asks.back());
      spare_asks.pop_back();
      a->free.clear();
      a->sold.clear();
    }
    a->free.add(from, to, qty.value);
    a->total_gpu_seconds = total;
    a->lapsed_gpu_seconds = 0;
    a->cancelled_gpu_seconds = 0;
    return a;
  }

  static void add_sold(LiveOrder& ask, LeaseId id) {
    ask.o.ask->sold.push_back(id);
  }

  // An order event built in place: the variant's alternative is constructed from an OrderOf, whose
  // conversion to Order builds the Order straight into the event (no default-constructed Order assigned
  // field by field, no temporary moved through the variant).
  struct OrderOf {
    const RestOrder& r;
    operator Order() const { return make_order(r); }  // NOLINT(google-explicit-constructor): by design
  };
  template <class E>
  void emit_order(const RestOrder& r) {
    push_event<E>(OrderOf{r});
  }

  // `o` as make_order(r) (for queries).
  static void fill_order(Order& o, const RestOrder& r) { o = make_order(r); }

  // make_order's copies of what most orders lack (a client_order_id, constraints), built in place but out of
  // line (`flatten` does not inline a noinline function): inlined, their loops and calls made make_order save
  // and restore six registers for every order, which the others then paid for too. `flatten` here: the
  // strings' and vectors' copies inlined in the copy.
  [[gnu::noinline, gnu::flatten]] static std::string copy_of(const std::string& s) { return s; }
  [[gnu::noinline, gnu::flatten]] static BidConstraints copy_of(const BidConstraints& c) { return c; }
  // An order's empty constraints (every order without any, each time an event or a query reports it), out of
  // line with `tune=skylake`: GCC's generic tuning zeroes the 104 bytes inline with `rep stos` (13 stores one at a
  // time after a slow start), this tuning with seven 16-byte stores. Tuning only (the same instructions are
  // allowed); its own function, as a function so tuned inlines none of the generic ones that make_order does
  // (make_order itself so tuned: plain +5.3 % instructions). Plain -0.28 % instructions. GCC on x86-64 only:
  // Clang before 12 ignores `tune=` with a warning, which -Werror makes an error.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define GPUEX_TUNED_STORES gnu::target("tune=skylake")
#else
#define GPUEX_TUNED_STORES
#endif
  [[gnu::noinline, GPUEX_TUNED_STORES]] static BidConstraints empty_constraints() { return {}; }
#undef GPUEX_TUNED_STORES

  // The full Order of a compact one, every field initialized once (designated, in declaration order: a
  // field left out here would silently keep its default, so every one is named).
  // `flatten`: the client_order_id's and the constraints' copies inlined (out of line, GCC called
  // basic_string's _M_construct for each string). Without this and flush_views' flatten: plain +0.2 %, realistic
  // +0.6 % instructions (with MarketId interned, session 18).
  [[gnu::flatten]] static Order make_order(const RestOrder& r) {
    const RestRequest& rq = r.request;
    const Seconds window_end = r.window_end();
    // Read once: the string copies' calls between its two uses would make GCC read it through the book again.
    const MarketId market = *r.market();
    using RR = RestRequest;
    using MK = RestRequest::MarketKind;
    return Order{
        .id = r.id,
        .account = r.account,
        .request =
            OrderRequest{
                .side = rq.side,
                .client_order_id = rq.cold ? copy_of(rq.cold->client_order_id) : std::string(),
                .market = rq.market_kind == MK::resolved ? market
                          : rq.market_kind == MK::cold   ? rq.cold->request_market
                                                         : MarketId{},
                .pool = r.request_pool(),
                .price = rq.price,
                .quantity = rq.quantity,
                // The optionals spelled out here (duration() and expire_at() compute the same): an optional
                // a call returns, inlined or not, GCC assembles on the stack and copies twice.
                .start = (rq.has & RR::kStart)
                             ? std::optional((rq.has & RR::kColdStart) ? rq.cold->start : r.window_start)
                             : std::nullopt,
                .end = (rq.has & RR::kEnd)
                           ? std::optional((rq.has & RR::kColdEnd) ? rq.cold->end : window_end)
                           : std::nullopt,
                .duration = (rq.has & RR::kDuration)
                                ? std::optional((rq.has & RR::kColdDuration) ? rq.cold->duration
                                                                             : Seconds(rq.duration_v))
                                : std::nullopt,
                .constraints = rq.cons ? copy_of(*rq.cons) : empty_constraints(),
                .min_duration = r.min_duration(),
                .min_chunk = rq.min_chunk,
                .time_in_force = rq.time_in_force,
                .expire_at = (rq.has & RR::kExpire) ? std::optional(rq.cold->expire_at) : std::nullopt,
                .post_only = rq.post_only,
                .stp = rq.stp,
            },
        .market = market,
        .window_start = r.window_start,
        .window_end = window_end,
        .effective_price = r.effective_price(),
        .green_discount_bps = r.green_discount_bps(),
        .status = r.status,
        .reason = r.reason,
        .bucket = r.bucket,
        .priority = r.priority(),
        .created_at = r.created_at,
        .updated_at = r.updated_at(),
        .filled = r.filled_gpus(),
        .remaining = r.remaining_gpus(),
        .total_gpu_seconds = r.ask ? r.ask->total_gpu_seconds : 0,
        .filled_gpu_seconds = r.filled_seconds(),
        .lapsed_gpu_seconds = r.ask ? r.ask->lapsed_gpu_seconds : 0,
        .free_gpu_seconds = r.free_seconds(),
        .cancelled_gpu_seconds = r.ask ? r.ask->cancelled_gpu_seconds : 0,
        .free = r.ask ? SmallSteps(r.ask->free) : SmallSteps(),
        .body_hash = r.body_hash(),
    };
  }

  // ---------------------------------------------------------------- accounts

  // The entries of `accounts` by id (accounts are never erased and every one is made here), so that the lookup
  // of a command's account is a probe, not a tree descent.
  using AccountSlot = IdIndex<Account>::Slot;
  IdIndex<Account> account_index;

  // account()'s last answer: a command asks for the same account several times (a cancel takes the order out
  // of its sums, then out of its list; a fill takes the bid out, bills the buyer, puts the bid back).
  AccountSlot last_account;

  // The repeat inline, the probe (and a new account) out of line (account_slow): a call of ~15 instructions for
  // an answer already at hand.
  Account& account(AccountId id) {
    if (last_account.p && last_account.id == id.value) return *last_account.p;
    return account_slow(id);
  }

  [[gnu::noinline]] Account& account_slow(AccountId id) {
    if (const AccountSlot* e = account_index.find(id.value)) {
      last_account = *e;
      return *e->p;
    }
    auto [it, inserted] = accounts.try_emplace(id);  // std::map: the address is stable
    if (inserted) it->second.limits = cfg.default_limits;
    account_index.insert(id.value, &it->second);
    return it->second;
  }

  static Seconds bid_seconds(const RestOrder& o) {
    return o.is_duration_bid() ? *o.request.duration() : o.window_end() - o.window_start;
  }

  // `known`: the order's account when the caller has it at hand (else it is looked up).
  void account_add(LiveOrder& lo, int sign, Account* known = nullptr) {
    add_to_sums(known ? *known : account(lo.o.account), lo.o, sign);
  }
  // What an open order adds to its account's sums (sign -1: takes it out).
  static void add_to_sums(Account& a, const RestOrder& o, int sign) {
    a.open_orders += sign;
    if (o.is_buy()) {
      a.open_gpus += sign * o.remaining.value;
      a.notional_x3600 += sign * cost_x3600(o.request.price, o.remaining, bid_seconds(o));
    }
  }

  void set_owed(LiveLease& l, Micros owed) {  // l has not ended
    account(buyer(l)).notional_x3600 += static_cast<Int128>(owed - l.amount) * 3600;
    l.amount = owed;
  }

  // ---------------------------------------------------------------- pools and prices

  Price tick(const MarketId& m) const {
    auto it = books.find(m);
    return it == books.end() ? Price(100) : it->second.spec.tick;
  }

  bool classify(LivePool& lp) {
    const GreenTierRule* r = lp.p.verified_at(now) ? policy.classify(lp.p.spec.energy) : nullptr;
    const GreenTier tier = r ? r->tier : GreenTier::none;
    const std::int32_t bps = r ? r->discount_bps : 0;
    const bool changed = tier != lp.p.green_tier || bps != lp.p.green_discount_bps;
    lp.p.green_tier = tier;
    lp.p.green_discount_bps = bps;
    return changed;
  }

  // Regions by number, given as pools and resting bids name them (never removed): a walk compares a pool's
  // region with a bid's, and finds the bid sets of a region, by number instead of by string.
  std::map<std::string, std::uint32_t, std::less<>> region_numbers;
  std::uint32_t region_number(const std::string& r) {
    return region_numbers.try_emplace(r, static_cast<std::uint32_t>(region_numbers.size())).first->second;
  }
  // The numbers of the regions of a bid that rests, which has some (once per constraint set: a walk and a hook
  // no longer look each region's name up in the map).
  const std::vector<std::uint32_t>& region_nums(const RestOrder& o) {
    const InternedCons& ic = o.request.cons.interned();
    if (ic.regions.size() != ic.c.regions.size()) {
      ic.regions.clear();
      for (const std::string& r : ic.c.regions) ic.regions.push_back(region_number(r));
    }
    return ic.regions;
  }
  // The same for a bid that may not rest yet (`c`, its constraints, name regions): the numbers kept, else
  // region_numbers_of's into `scratch`.
  const std::vector<std::uint32_t>& known_region_nums(const RestOrder& bid, std::vector<std::uint32_t>& scratch) const {
    const InternedCons& ic = bid.request.cons.interned();
    if (ic.regions.size() == ic.c.regions.size()) return ic.regions;
    region_numbers_of(ic.c, scratch);
    return scratch;
  }
  // A duration bid's key into (out of) a group's sets, their duration_best kept.
  static void insert_duration(BidSets& s, const BidKey& k) {
    s.duration.insert(k);
    s.duration_best = std::max(s.duration_best, k.price.value);
  }
  static void erase_duration(BidSets& s, const BidKey& k) {
    s.duration.erase(k);
    if (k.price.value == s.duration_best) {  // it may have been the first
      s.duration_best = s.duration.empty() ? kNoBid : s.duration.begin()->price.value;
    }
  }
  // The sets of region number n in a group's by_region (added if need be).
  static BidSets& by_number(std::vector<std::unique_ptr<BidSets>>& v, std::uint32_t n) {
    if (n >= v.size()) v.resize(n + 1);
    if (!v[n]) v[n] = std::make_unique<BidSets>();
    return *v[n];
  }
  // The numbers of c's regions added to `out` (a region no pool or resting bid named: a number none has).
  void region_numbers_of(const BidConstraints& c, std::vector<std::uint32_t>& out) const {
    for (const std::string& r : c.regions) {
      auto it = region_numbers.find(r);
      out.push_back(it == region_numbers.end() ? std::numeric_limits<std::uint32_t>::max() : it->second);
    }
  }

  bool pool_satisfies(const Pool& p, const BidConstraints& c) const {
    return pool_fits_spec(p, c) && (!has_energy(c) || pool_verified_for(p, c));
  }
  static bool has_energy(const BidConstraints& c) {
    return c.green_only || c.max_pue_x1000 || c.min_renewable_pct_x100 || c.max_carbon_g_per_kwh_x100;
  }
  // The part of pool_satisfies that reads only the pool's spec, which never changes once the pool is added (a
  // BidGroup keeps its verdicts).
  static bool pool_fits_spec(const Pool& p, const BidConstraints& c) {
    const PoolSpec& s = p.spec;
    if (s.tier == Tier::spot && !c.interruptible) return false;
    if (!c.tiers.empty() && !contains_tier(c.tiers, s.tier)) return false;
    if (!c.regions.empty() && !names_region(c.regions, s.region)) return false;
    if (c.nvlink && !s.nvlink) return false;
    if (c.min_fabric && s.fabric < *c.min_fabric) return false;
    if (c.min_fabric_gbps && s.fabric_gbps < *c.min_fabric_gbps) return false;
    if (c.min_sla_pct_x1000 && s.sla_pct_x1000 < *c.min_sla_pct_x1000) return false;
    if (c.max_pue_x1000 && s.energy.pue_x1000 > *c.max_pue_x1000) return false;
    if (c.min_renewable_pct_x100 && s.energy.renewable_pct_x100 < *c.min_renewable_pct_x100) return false;
    if (c.max_carbon_g_per_kwh_x100 && s.energy.carbon_g_per_kwh_x100 > *c.max_carbon_g_per_kwh_x100) return false;
    return true;
  }
  // Out of line: the string search inlined made every pool_fits_spec call save and restore six registers, though
  // a group's constraints (most calls: a kept verdict's first judgement) name no region.
  [[gnu::noinline]] static bool names_region(const std::vector<std::string>& regions, const std::string& r) {
    return std::find(regions.begin(), regions.end(), r) != regions.end();
  }
  // The part of pool_satisfies for energy constraints `c` that changes with time and verification: the pool's
  // energy figures are verified now, and it has a green tier if c asks for one.
  bool pool_verified_for(const Pool& p, const BidConstraints& c) const {
    return p.verified_at(now) && (!c.green_only || p.green_tier != GreenTier::none);
  }

  // ---------------------------------------------------------------- order geometry

  Seconds bid_start(const RestOrder& b) const { return b.is_duration_bid() ? now : b.window_start; }
  Seconds bid_end(const RestOrder& b) const { return b.is_duration_bid() ? now + *b.request.duration() : b.window_end(); }
  static Seconds min_piece(const RestOrder& a) { return std::max(a.ask_min_duration(), Seconds(1)); }

  // Whether a trade starting at `start` is a spot trade (within the spot horizon), not one of its month.
  bool spot_start(Seconds start) const { return start - now <= cfg.spot_horizon; }
  Bucket trade_bucket(Seconds start) const { return spot_start(start) ? Bucket::spot() : month_of(start); }
  // month_bucket(t), kept by day for kMonthDays days from the first one asked for: the calendar arithmetic is
  // ~85 instructions, and every trade and every order placed outside the spot horizon asks for one, of a day a
  // few months from now (1.4 M instructions in the realistic bench's 20,000 commands).
  static constexpr std::int64_t kDay = 86'400;
  static constexpr std::uint64_t kMonthDays = 4096;
  mutable std::int64_t month_days_from{0};
  mutable std::vector<Bucket> month_days;  // by day from month_days_from; a spot bucket: not computed yet
  Bucket month_of(Seconds t) const {
    if (t.value < 0) return month_bucket(t);
    if (month_days.empty()) {
      month_days.assign(kMonthDays, Bucket::spot());
      month_days_from = t.value / kDay;
    }
    const auto i = static_cast<std::uint64_t>(t.value / kDay - month_days_from);
    if (i >= kMonthDays) return month_bucket(t);
    if (month_days[i].is_spot()) month_days[i] = month_bucket(t);
    return month_days[i];
  }
  // Whether an order's bucket is spot now; else it is the month of its window's start. An order's window never
  // changes and time only moves on, so its month bucket can only give way to spot, once (refresh_view).
  bool in_spot_bucket(const RestOrder& o) const {
    if (o.is_buy()) return o.is_duration_bid() || spot_start(o.window_start);  // as trade_bucket
    return o.window_start <= now;
  }
  Bucket order_bucket(const RestOrder& o) const {
    return in_spot_bucket(o) ? Bucket::spot() : month_of(o.window_start);
  }

  // GPUs an ask offers for at least its minimum piece from its reference instant, down to its lot.
  // `as_placed`: no fill has touched it since on(PlaceOrder) (hook()'s as_placed), so its free capacity is its
  // quantity, a whole number of lots, over all of its window: no read of it.
  Qty ask_view_qty(const RestOrder& a, bool as_placed = false) const {
    const Seconds ref = std::max(now, a.window_start);
    const Seconds md = min_piece(a);
    if (ref + md > a.window_end()) return Qty(0);
    if (as_placed) return Qty(a.request.quantity);
    // Over one second (min_duration 0 or 1) the least is the value at its start: pieces start and end on whole seconds.
    const std::int64_t f = md == Seconds(1) ? a.ask->free.at(ref) : a.ask->free.min(ref, ref + md);
    const std::int64_t lot = a.request.min_chunk.value;
    return Qty(f / lot * lot);
  }

  // True while a piece of at least min_duration with one lot free remains ahead.
  bool ask_has_piece(const RestOrder& a) const {
    const Seconds from = std::max(now, a.window_start);
    const Seconds md = min_piece(a);
    const std::int64_t lot = a.request.min_chunk.value;
    bool in_run = false;
    Seconds run_from;
    Seconds run_end;
    for (const Step& p : a.ask->free.pieces()) {
      const Seconds s = std::max(p.from, from);
      const Seconds e = std::min(p.to, a.window_end());
      if (e <= s) continue;
      if (p.gpus >= lot) {
        if (!in_run || s != run_end) run_from = s;
        in_run = true;
        run_end = e;
        if (run_end - run_from >= md) return true;
      } else {
        in_run = false;
      }
    }
    return false;
  }

  // An ask's own fields: a RestOrder's in its AskSide, an Order's in itself (the same names).
  static AskSide& ask_of(RestOrder& a) { return *a.ask; }
  static Order& ask_of(Order& a) { return a; }
  static Seconds window_end_of(const RestOrder& a) { return a.window_end(); }
  static Seconds window_end_of(const Order& a) { return a.window_end; }

  template <class O>  // RestOrder or Order
  void refresh_ask_accounting(O& a) const {
    if (a.is_buy() || !a.is_open()) return;
    const Seconds ref = std::max(now, a.window_start);
    auto& s = ask_of(a);
    s.lapsed_gpu_seconds = s.free.integral(a.window_start, std::min(ref, window_end_of(a)));
    a.free_gpu_seconds = s.free.integral(ref, window_end_of(a));
  }

  // GPUs bid `b` can take from ask `a` over [ws, we), at most `cap`, in whole lots; 0 if not eligible.
  // Price is not checked here.
  Qty eligible_qty(const RestOrder& b, Qty cap, const RestOrder& a, Seconds ws, Seconds we) const {
    return eligible_qty(b, cap, a, a.ask->pool->p, ws, we, true);
  }

  // The same with the ask's pool given (`pool` must be a's); check_pool = false when the caller already
  // knows that the pool satisfies b's constraints.
  Qty eligible_qty(const RestOrder& b, Qty cap, const RestOrder& a, const Pool& pool, Seconds ws, Seconds we,
                   bool check_pool) const {
    if (!a.is_open() || !b.is_open() || a.book != b.book) return Qty(0);
    const Seconds a_start = std::max(a.window_start, now);
    if (ws < a_start || we > a.window_end() || we <= ws) return Qty(0);
    if (we - ws < a.ask_min_duration()) return Qty(0);
    if (check_pool && !pool_satisfies(pool, b.request.constraints())) return Qty(0);
    const std::int64_t lot = std::lcm(b.request.min_chunk.value, a.request.min_chunk.value);
    const std::int64_t q = std::min(cap.value, a.ask->free.min(ws, we));
    return Qty(q / lot * lot);
  }

  // The window conditions of eligible_qty alone, on a book key's copies (no order touched): false means
  // eligible_qty would return 0.
  bool window_fits(const AskKey& a, Seconds ws, Seconds we) const {
    return ws >= std::max(a.run_start(), now) && we <= a.run_end() && we > ws && we - ws >= a.min_duration &&
           (a.max_run == kAnyRun || (we - ws).value <= a.max_run);
  }

  // ---------------------------------------------------------------- book views

  // The price an order is shown at (compute_shown's): a bid's limit, an ask's effective price.
  static Price shown_price(const RestOrder& o) { return o.is_buy() ? o.request.price : o.ask_effective_price(); }
  // Whether it is counted apart as constrained (compute_shown's): a bid with attribute constraints.
  static bool shown_constrained(const RestOrder& o) {
    return o.is_buy() && o.request.cons && o.request.cons->has_attribute_constraints();
  }

  // Before an order's shown price changes while it may be shown (an amend's new price, a re-pricing): its
  // contribution at the old price taken off its view, which refresh_view could not tell afterwards (ShownMark
  // keeps no price). The same changes of the view, in the same order, as refresh_view's taking off the old and
  // putting on the new, which the hook after the change does. Also an ended order's (unshow). `flatten`: view_add()
  // inlined, as in refresh_view (out of line, a call with the Shown passed in memory).
  [[gnu::flatten]] void hide_view(LiveOrder& lo) {
    view_apply(lo.shown.as_of(shown_price(lo.o), lo.o.bucket, lo.o.request.side, shown_constrained(lo.o)), lo.o.market(),
               -1);
    lo.shown = ShownMark();
  }

  Shown compute_shown(const LiveOrder& lo, bool as_placed = false) const {
    Shown s;
    const RestOrder& o = lo.o;
    if (!lo.in_book || !o.is_open()) return s;
    s.bucket = o.bucket;
    s.side = o.request.side;
    s.price = shown_price(o);
    if (o.is_buy()) {
      s.constrained = shown_constrained(o);
      s.qty = Qty32(o.remaining);
    } else {
      s.qty = Qty32(ask_view_qty(o, as_placed));
    }
    s.shown = s.constrained || s.qty.value > 0;
    return s;
  }

  // The view (market, bucket) as touched by this command; the last one is remembered (most commands touch
  // one view several times) until flush_views() clears `touched`.
  Touched& touch(const MarketId* m, Bucket bucket) {
    if (last_touched && m == last_touched->market && bucket == last_touched->bucket) return *last_touched;
    for (std::size_t i = 0; i < n_touched; ++i) {
      Touched& t = touched[i];
      if (t.bucket == bucket && (t.market == m || *t.market == *m)) return *(last_touched = &t);
    }
    if (n_touched == touched.size()) touched.emplace_back();
    Touched& t = touched[n_touched++];
    t.market = m;
    t.bucket = bucket;
    t.before.clear();
    if (!last_view || m != last_view_key.first || bucket != last_view_key.second) {
      auto [vit, fresh] = view_of.try_emplace(std::make_pair(m, bucket), nullptr);
      if (fresh) vit->second = &views[ViewKey{*m, bucket}];  // std::map: the address is stable
      last_view_key = {m, bucket};
      last_view = vit->second;
    }
    t.view = last_view;
    t.constrained_before = t.view->constrained;
    return *(last_touched = &t);
  }

  void view_apply(const Shown& s, const MarketId* m, int sign) {
    if (!s.shown) return;
    view_add(s, m, sign, sign * s.qty.value);
  }

  // Adds `n_orders` orders and `gpus` GPUs to the level (or the constrained count) that `s` is shown at.
  // The usual change, of a level that stays, here; a level that appears or goes in level_in_or_out (out of
  // line: its map node's allocation and free kept view_add's every call saving registers for them).
  void view_add(const Shown& s, const MarketId* m, int n_orders, std::int64_t gpus) {
    Touched& t = touch(m, s.bucket);
    View& v = *t.view;
    if (s.constrained) {
      v.constrained.orders += n_orders;
      v.constrained.gpus += Qty(gpus);
      return;
    }
    Levels& levels = s.side == Side::buy ? v.bids : v.asks;
    Levels::Entry* const lvl = levels.find(s.price);
    if (!lvl || lvl->qty.value + gpus == 0) return level_in_or_out(t, levels, lvl, s, gpus);
    const Qty before = lvl->qty;
    lvl->qty = before + Qty(gpus);
    note_level(t, s.side, s.price, before, lvl->qty);
  }

  // `lvl`: the level, which the change empties, or null: a level that appears (unless the change is 0).
  [[gnu::noinline]] void level_in_or_out(Touched& t, Levels& levels, Levels::Entry* lvl, const Shown& s,
                                         std::int64_t gpus) {
    const Qty before = lvl ? lvl->qty : Qty(0);
    const Qty after = before + Qty(gpus);
    note_level(t, s.side, s.price, before, after);
    if (lvl) {
      levels.erase(lvl);
    } else if (after.value != 0) {
      levels.insert(s.price, after);
    }
  }

  // A level's change in the command's record: its quantity before the command (kept from its first change)
  // and now.
  static void note_level(Touched& t, Side side, Price price, Qty before, Qty after) {
    for (LevelBefore& b : t.before) {
      if (b.side == side && b.price == price) {
        b.now = after;
        return;
      }
    }
    t.before.push_back(LevelBefore{side, price, before, after});
  }

  // The month set at placement or restore (order_bucket) stays until the order turns spot: no month computed.
  void settle_bucket(RestOrder& o) const {
    if (!o.bucket.is_spot() && in_spot_bucket(o)) o.bucket = Bucket::spot();
  }

  // refresh_view of an order that is no longer open (hook's end of it): its contribution, if any, off its view at
  // the bucket it was shown in, then its bucket settled (its OrderDone reports it). Without compute_shown (it
  // shows nothing now) and refresh_view's frame: ~40,000 of plain's 69,000 refreshes.
  void unshow(LiveOrder& lo) {
    if (lo.shown.shown()) hide_view(lo);
    settle_bucket(lo.o);
  }

  // `as_placed`: as ask_view_qty()'s. `flatten`: view_add(), called only here (through view_apply), inlined at
  // its three calls (GCC kept it out of line: a call with the Shown passed in memory on every change).
  [[gnu::flatten]] void refresh_view(LiveOrder& lo, bool as_placed = false) {
    // The bucket it was shown in is the one it had until here (ShownMark).
    const Bucket was_bucket = lo.o.bucket;
    settle_bucket(lo.o);
    const Shown s = compute_shown(lo, as_placed);
    // Unchanged (the side never changes, and the price of an order still shown neither: hide_view): nothing to do.
    if (ShownMark(s) == lo.shown && s.bucket == was_bucket) return;
    if (lo.shown.shown()) return reshow(lo, s, was_bucket);
    view_apply(s, lo.o.market(), +1);  // a placement's, most often
    lo.shown = ShownMark(s);
  }

  // refresh_view of an order its view shows (its old contribution rebuilt from ShownMark and the order), now as `s`.
  // Inlined into refresh_view (flatten); written apart, GCC's code for the two measured 0.35 % fewer plain
  // instructions than the same lines written inside refresh_view.
  [[gnu::flatten]] void reshow(LiveOrder& lo, const Shown& s, Bucket was_bucket) {
    const Shown was = lo.shown.as_of(shown_price(lo.o), was_bucket, lo.o.request.side, shown_constrained(lo.o));
    if (s.shown && s.constrained == was.constrained && s.side == was.side && s.bucket == was.bucket &&
        s.price == was.price) {
      // Still on the same level (a fill or an amend of quantity): one change of its quantity, the same as
      // taking the old contribution off and putting the new one on.
      view_add(s, lo.o.market(), 0, s.qty.value - was.qty.value);
    } else {
      view_apply(was, lo.o.market(), -1);
      view_apply(s, lo.o.market(), +1);
    }
    lo.shown = ShownMark(s);
  }

  // One BookDelta per changed view, in (market, bucket) order; in each, the changed levels, buys by price
  // descending then sells by price ascending.
  // `flatten`: the BookDelta's construction in the sink inlined (a call a delta otherwise).
  [[gnu::flatten]] void flush_views() {
    if (n_touched > 1) {
      std::sort(touched.begin(), touched.begin() + static_cast<std::ptrdiff_t>(n_touched),
                [](const Touched& a, const Touched& b) {
                  if (a.market != b.market && *a.market != *b.market) return *a.market < *b.market;
                  return a.bucket < b.bucket;
                });
    }
    for (std::size_t i = 0; i < n_touched; ++i) {
      Touched& t = touched[i];
      View& v = *t.view;
      std::size_t changed = 0;
      for (const LevelBefore& b : t.before) {
        if (b.now != b.qty) t.before[changed++] = b;
      }
      if (changed == 0 && v.constrained == t.constrained_before) continue;
      const auto first = t.before.begin();
      const auto last = first + static_cast<std::ptrdiff_t>(changed);
      if (changed > 1) {  // most commands change one level
        std::sort(first, last, [](const LevelBefore& a, const LevelBefore& b) {
          if (a.side != b.side) return a.side == Side::buy;
          return a.side == Side::buy ? a.price > b.price : a.price < b.price;
        });
      }
      ++v.sequence;
      BookDelta& d = emit_as<BookDelta>(*t.market, t.bucket, v.sequence, LevelChanges{}, v.constrained);
      for (auto it = first; it != last; ++it) d.changes.push_back(LevelChange{it->side, it->price, it->now});
    }
    n_touched = 0;
    last_touched = nullptr;
  }

  // ---------------------------------------------------------------- timers

  Seconds next_order_time(const RestOrder& o) const {
    Seconds best = kForever;
    auto consider = [&](Seconds t) {
      if (t > now && t < best) best = t;
    };
    if (o.request.time_in_force == TimeInForce::gtd && o.request.expire_at()) consider(*o.request.expire_at());
    if (o.is_buy()) {
      if (!o.is_duration_bid()) {
        consider(o.window_start + Seconds(1));
        consider(o.window_start - cfg.spot_horizon);
      }
      return best;
    }
    const Seconds md = min_piece(o);
    consider(o.window_start);
    consider(o.window_end());
    consider(o.window_end() - md + Seconds(1));
    for (const Step& p : o.ask->free.pieces()) {
      for (Seconds b : {p.from, p.to}) {
        consider(b);
        consider(b - md + Seconds(1));
      }
    }
    return best;
  }

  void schedule_order(LiveOrder& lo) {
    const Seconds t = next_order_time(lo.o);
    const std::int64_t after = (t - lo.o.created_at).value;
    const std::int32_t enc = t >= kForever                                            ? LiveOrder::kNoTimer
                             : after >= 0 && after <= std::numeric_limits<std::int32_t>::max() ? static_cast<std::int32_t>(after)
                                                                                      : LiveOrder::kWideTimer;
    if (enc == lo.timer && enc != LiveOrder::kWideTimer) return;
    lo.timer = enc;
    if (t < kForever) timers.push(t, TimerKind::order, lo.o.id.value);
  }

  // Whether a heap entry of lo's at `at` is its pending timer (and then it is no longer pending). A wide timer
  // honours every entry and stays: the time step only re-checks an order it wakes, so an extra wake is harmless.
  static bool take_timer(LiveOrder& lo, Seconds at) {
    if (lo.timer == LiveOrder::kWideTimer) return true;
    if (lo.timer < 0 || lo.o.created_at + Seconds(lo.timer) != at) return false;
    lo.timer = LiveOrder::kNoTimer;
    return true;
  }

  Seconds next_lease_time(const LiveLease& l) const {
    if (l.status == LeaseStatus::preempted) return ends_at(l);
    if (l.status == LeaseStatus::reserved) return l.start;
    return l.end;
  }

  void schedule_lease(const LiveLease& l) { timers.push(next_lease_time(l), TimerKind::lease, l.id.value); }

  void schedule_pool(const LivePool& lp) {
    if (lp.p.verified && lp.p.verified_until > now) {
      timers.push(lp.p.verified_until, TimerKind::pool, lp.p.id.value);
    }
  }

  // ---------------------------------------------------------------- order indexing

  // An ask a duration bid could use now: its window started and it has GPUs free at this instant. The
  // ask's timers fire at its start and at every step of its free capacity, so this stays current.
  bool spot_now(const RestOrder& a) const { return a.window_start <= now && a.ask->free.at(now) > 0; }

  // Visits, in ask priority order, the resting asks of `b` a bid could use (a duration bid: those in
  // book_spot_asks) with effective <= limit whose pool satisfies `c` and whose window can hold the bid's
  // (window_fits; a bid's window does not change during a walk): the others eligible_qty would reject.
  // fn(key) returns false to stop; like a walk of one set, fn may erase or re-insert the ask of the key it
  // was given (a fill changes only that ask), never another; pool attributes do not change during a walk.
  //
  // A duration bid: a k-way merge over the admitted pools' book_spot_asks (joined by cheapest price), each head already moved past
  // keys that do not fit; the head of the set fn changed is re-sought by the key it was at (ChunkedSet's
  // iterators do not survive a change), and a head whose set had no other fitting key was dropped before
  // fn ran. A fixed-window bid: every slot of every admitted pool is tested from contiguous memory, those
  // that fit become candidates (copies: fn's changes to the slots cannot disturb them), visited from a
  // min-heap; its keys carry the order fields (effective, priority, id, lo, pool) only.
  struct AskHead {
    const AskSet* s{nullptr};
    AskSet::const_iterator it;
    AskKey key;  // *it once settled, kept to re-seek after fn changed the set
    std::uint64_t version{0};
  };
  struct AskCandidate {
    Price effective;
    Seq priority{0};
    LiveOrder* lo{nullptr};
    const LivePool* pool{nullptr};
  };
  // walk_asks' vectors, one set per nesting depth, reused: a fresh vector per walk was a malloc
  // per placement (and, reserved, a page-faulting one).
  struct WalkScratch {
    std::vector<AskHead> heads;
    std::vector<SpotPool> pools;  // a duration bid's pools within its limit not opened before its first fn call
    std::vector<AskCandidate> candidates;
    std::vector<std::uint32_t> regions;  // the numbers of the bid's regions (RegionFilter's, when not kept)
  };
  // A bid's regions as a walk judges pools by them (pool_admits): the numbers below 64 as bits, so that a pool's
  // region is one shift and mask instead of a search of the numbers (~15 instructions a pool out of line, for
  // the ~80,000 pools the realistic bench's bid walks judge); a number from 64 on (a late-numbered region) is
  // still searched for.
  struct RegionFilter {
    const std::vector<std::uint32_t>* nums{nullptr};  // null: the bid names no region
    std::uint64_t low{0};                             // the bits of its numbers below 64
    bool high{false};                                 // it has a number from 64 on
    explicit RegionFilter(const std::vector<std::uint32_t>& regions) {
      if (regions.empty()) return;
      nums = &regions;
      for (const std::uint32_t r : regions) {
        if (r < 64) {
          low |= std::uint64_t{1} << r;
        } else {
          high = true;
        }
      }
    }
    // Its numbers' region_bit each, from `low` and `high` (numbers from 63 on share bit 63).
    std::uint64_t bits() const { return low | (high ? region_bit(63) : 0); }
    // Inline (GCC kept it out of line: ~35,000 calls in the realistic bench's 20,000 commands, from judge_pool
    // and pool_admits), the search for a number from 64 on apart.
    [[gnu::always_inline]] bool admits(std::uint32_t region) const {
      if (!nums) return true;
      if (region < 64) return (low >> region) & 1;
      return high && admits_high(region);
    }
    [[gnu::noinline]] bool admits_high(std::uint32_t region) const {
      return std::find(nums->begin(), nums->end(), region) != nums->end();
    }
  };
  // A run's (effective price, priority), its place in a fixed-window walk, as scan_runs' stop keeps it:
  // trivially constructible, so that the array of them is not zeroed at every scan (std::pair's constructor
  // did: 32 stores a walk).
  struct RunKey {
    std::int64_t effective;
    Seq priority;
    friend auto operator<=>(const RunKey&, const RunKey&) = default;
  };
  // Puts v in the place of a max-heap's greatest (v is less) by one sift down from the top: a push_heap and a
  // pop_heap sifted twice, out of line (~7,500 of each in the realistic bench's 20,000 commands).
  static void replace_greatest(RunKey* heap, std::size_t n, RunKey v) {
    std::size_t i = 0;
    for (std::size_t child = 1; child < n; child = 2 * i + 1) {
      if (child + 1 < n && heap[child] < heap[child + 1]) ++child;
      if (!(v < heap[child])) break;
      heap[i] = heap[child];
      i = child;
    }
    heap[i] = v;
  }
  // walk_asks' candidates for a fixed-window bid's [ws, we) (0 <= ws < we <= kRunMax) from the book's free-run
  // index, into `cands` (see walk_asks for stop_after). Out of line and not a template: one copy for every
  // walk_asks, and the scan's loops keep their values in registers (inlined into each walk_asks, the cell and
  // entry loops kept their counters and bounds on the stack).
  [[gnu::noinline]] void scan_runs(const Book& b, const RestOrder& bid, Price limit, const BidConstraints& c,
                                   const BidGroup* group, const RegionFilter& regions, Seconds ws, Seconds we,
                                   std::int64_t stop_after, std::vector<AskCandidate>& cands) const {
    // The runs that hold [ws, we): in cells whose start week is at most ws's and end week at least we's.
    RunIndex& ix = b.free_runs;
    const std::uint64_t mark = ++walk_count * 4;  // RunPoolMark::word without its flags
    const auto ws32 = static_cast<std::uint32_t>(ws.value);
    const auto we32 = static_cast<std::uint32_t>(we.value);
    const auto len32 = static_cast<std::uint32_t>((we - ws).value);
    // The tiers pool_satisfies admits (it judges the tier again with the rest, per pool), listed: a cell's
    // loop reads only theirs (most bids exclude spot).
    std::array<std::size_t, kTiers> tiers{};
    std::size_t n_tiers = 0;
    for (std::size_t t = 0; t < kTiers; ++t) {
      const Tier tier = static_cast<Tier>(t);
      if ((tier != Tier::spot || c.interruptible) && (c.tiers.empty() || contains_tier(c.tiers, tier))) {
        tiers[n_tiers++] = t;
      }
    }
    // The stop_after least (effective, priority) of the sure candidates so far (a max-heap), and the
    // greatest of them once there are that many: runs after it are left out (cells are sorted).
    constexpr std::size_t kMaxStop = 16;
    const std::size_t want =
        stop_after > 0 && stop_after <= static_cast<std::int64_t>(kMaxStop) ? static_cast<std::size_t>(stop_after) : 0;
    std::array<RunKey, kMaxStop> best;
    std::size_t n_best = 0;
    RunKey cut{limit.value, std::numeric_limits<Seq>::max()};
    // The cells of a row before ws's week hold runs that start before it (`starts_before`: e.start > ws is
    // not asked), and a cell after we's (in its row) runs that end after it (`ends_after`: e.end < we is not
    // asked); past both edges only a run's min_duration is judged. Each is known per row and cell, so the
    // scan is instantiated for each pair. The index's vectors are read through pointers taken once: the
    // candidates' push_back would otherwise make the compiler load them again for every entry and cell.
    RunPoolMark* const marks = ix.marks.data();
    const LivePool* const* const run_pools = ix.pools.data();
    const auto scan = [&](const RunSet& set, auto starts_before, auto ends_after) {
      for (const std::vector<RunEntry>& chunk : set.chunks()) {
        if (chunk.front().effective.value > cut.effective) return;
        for (const RunEntry& e : chunk) {
          if (e.effective.value >= cut.effective &&
              (e.effective.value > cut.effective || e.priority > cut.priority)) {
            return;
          }
          if constexpr (!decltype(starts_before)::value) {
            if (e.start > ws32) continue;
          }
          if constexpr (!decltype(ends_after)::value) {
            if (e.end < we32) continue;
          }
          if (len32 < e.min_duration) continue;
          const std::uint32_t pool = e.pool;
          std::uint64_t& pm = marks[pool].word;
          if ((pm & ~RunPoolMark::kFlags) != mark) {
            const LivePool& pp = *run_pools[pool];
            pm = mark | (pool_admits(b, pp, group, c, regions) ? RunPoolMark::kOk : 0) |
                 (pp.p.provider == bid.account ? RunPoolMark::kOwn : 0);
          }
          if (!(pm & RunPoolMark::kOk)) continue;
          cands.push_back(AskCandidate{e.effective, e.priority, e.lo, run_pools[pool]});
          if (want == 0 || !e.unit_lot || (pm & RunPoolMark::kOwn)) continue;
          if (n_best < want) {
            best[n_best++] = {e.effective.value, e.priority};
            std::push_heap(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(n_best));
          } else {
            // The entry is before the cut (the checks above), the greatest kept: it takes the cut's place.
            replace_greatest(best.data(), n_best, {e.effective.value, e.priority});
          }
          if (n_best == want) cut = best.front();
        }
      }
    };
    // A cell, passed over by its least (RunRow::least) alone when that is past the cut; a tier by its cheapest,
    // and, for a bid that names regions, by its regions (a bid that names none does not read them).
    const bool by_region = regions.nums != nullptr;
    const std::uint64_t region_bits = regions.bits();
    const auto scan_cell = [&](const RunCell& cell, std::int64_t least, auto starts_before, auto ends_after) {
      if (least > cut.effective) return;
      for (std::size_t k = 0; k < n_tiers; ++k) {
        const std::size_t t = tiers[k];
        if (cell.cheapest[t] <= cut.effective && (!by_region || (cell.regions[t] & region_bits))) {
          scan(cell.by_tier[t], starts_before, ends_after);
        }
      }
    };
    const std::size_t ws_row = ix.row_of(ws32);
    const std::size_t rows = std::min(ws_row + 1, ix.rows.size());
    const std::int64_t we_week = ix.end_week(we32);  // one division, not one a row
    for (std::size_t r = 0; r < rows; ++r) {
      const RunRow& row = ix.rows[r];
      if (row.size == 0) continue;
      const std::size_t we_cell = RunIndex::cell_at(r, we_week);
      const RunCell* const cells = row.cells.data();
      const std::int64_t* const least = row.least.data();
      const std::size_t n_cells = row.cells.size();
      if (we_cell >= n_cells) continue;
      // we's cell, then the cells after it (ends_after); starts_before decided once a row.
      if (r < ws_row) {
        scan_cell(cells[we_cell], least[we_cell], std::true_type{}, std::false_type{});
        for (std::size_t i = we_cell + 1; i < n_cells; ++i) {
          scan_cell(cells[i], least[i], std::true_type{}, std::true_type{});
        }
      } else {
        scan_cell(cells[we_cell], least[we_cell], std::false_type{}, std::false_type{});
        for (std::size_t i = we_cell + 1; i < n_cells; ++i) {
          scan_cell(cells[i], least[i], std::false_type{}, std::true_type{});
        }
      }
    }
    // The candidates pushed before the cut came down to its last place and priced past it: the walk never
    // reaches them (fn stops by the want-th sure candidate, which is at most the cut), so they are dropped
    // before the heap is made instead of being heaped.
    if (want > 0 && n_best == want) {
      std::erase_if(cands, [&](const AskCandidate& x) {
        return x.effective.value > cut.effective || (x.effective.value == cut.effective && x.priority > cut.priority);
      });
    }
  }

  mutable std::deque<WalkScratch> head_stack;  // a deque: a nested walk's emplace_back keeps references
  mutable std::size_t head_depth{0};
  mutable std::uint64_t walk_count{0};  // numbers fixed-window walks (RunPoolMark::word)

  //
  // `stop_after` (a fixed-window bid's walk in match_bid; 0 elsewhere) says that fn stops the walk once it
  // was given that many asks that each surely fill at least one GPU: asks of another account (a pool's asks
  // are its provider's) whose min_chunk is 1, when the bid's is 1 too (a run has at least a lot free over
  // the window, so eligible_qty gives at least 1). The scan then keeps the stop_after least keys of such
  // candidates and leaves out the runs after the greatest of them, which the walk could never reach.
  template <class F>
  void walk_asks(const Book& b, const RestOrder& bid, Price limit, const BidConstraints& c, F&& fn,
                 std::int64_t stop_after = 0) const {
    if (bid.is_duration_bid() && limit < spot_floor(b)) return;  // no spot ask at its price: nothing to walk
    using It = AskSet::const_iterator;
    using Head = AskHead;
    if (head_depth == head_stack.size()) head_stack.emplace_back();
    WalkScratch& scratch = head_stack[head_depth];
    struct DepthGuard {
      std::size_t& d;
      explicit DepthGuard(std::size_t& x) : d(x) { ++d; }
      ~DepthGuard() { --d; }
      DepthGuard(const DepthGuard&) = delete;
      DepthGuard& operator=(const DepthGuard&) = delete;
    } guard(head_depth);
    const Seconds ws = bid_start(bid);
    const Seconds we = bid_end(bid);
    // The kept verdicts of the bid's group, when c is the bid's own constraints and their group is known.
    const BidGroup* group = &c == &bid.request.constraints() ? known_group(b, bid) : nullptr;
    scratch.regions.clear();
    const RegionFilter regions(group && !c.regions.empty() ? known_region_nums(bid, scratch.regions) : scratch.regions);
    if (!bid.is_duration_bid()) {
      // window_fits needs ws >= now and we > ws whatever the ask.
      if (ws < now || we <= ws) return;
      std::vector<AskCandidate>& cands = scratch.candidates;
      cands.clear();
      if (!b.free_runs.enabled) {  // the market's first fixed-window bid: index every resting ask's runs
        b.free_runs.enabled = true;
        b.free_runs.first_week = std::max<std::int64_t>(run_slot(now), 0);
        for (const AskPool& ap : b.ask_pools) {
          for_each_resting_ask(*ap.lp, [&](LiveOrder& lo) { index_runs(b, lo); });
        }
      }
      if (ws.value < 0 || we.value > kRunMax) {  // outside the index's 32-bit times: every resting ask
        for (const AskPool& ap : b.ask_pools) {
          if (!pool_satisfies(ap.lp->p, c)) continue;
          for_each_resting_ask(*ap.lp, [&](LiveOrder& lo) {
            const RestOrder& o = lo.o;
            if (o.ask_effective_price() > limit || we - ws < o.ask_min_duration()) return;
            bool holds = false;
            for_each_run(o, [&](Seconds from, Seconds to) { holds = holds || (from <= ws && to >= we); });
            if (holds) cands.push_back(AskCandidate{o.ask_effective_price(), o.priority(), &lo, ap.lp});
          });
        }
      } else {
        scan_runs(b, bid, limit, c, group, regions, ws, we, stop_after, cands);
      }
      // The order (effective, priority, id), as a min-heap's; the id is read from the order only for equal
      // priorities (an order's priority is the sequence number of the command that gave it, so two orders never
      // tie; kept for exactness).
      const auto later = [](const AskCandidate& x, const AskCandidate& y) {
        if (x.effective.value != y.effective.value) return x.effective.value > y.effective.value;
        if (x.priority != y.priority) return x.priority > y.priority;
        return x.lo->o.id.value > y.lo->o.id.value;
      };
      // Given in that order: the first few each found by a pass for the least, then, if fn goes on, the rest
      // through a heap. A bid's walk usually stops within a few of its ~50 candidates (realistic bench):
      // the passes cost less than make_heap's and the pops' moves. The order is a total one, so either way
      // gives the same sequence.
      constexpr int kByPass = 6;
      for (int given = 0; !cands.empty(); ++given) {
        if (given < kByPass) {
          AskCandidate* const first = cands.data();
          AskCandidate* const last = first + cands.size() - 1;
          AskCandidate* least = last;
          for (AskCandidate* p = first; p != last; ++p) {
            if (later(*least, *p)) least = p;
          }
          std::swap(*least, *last);
        } else {
          if (given == kByPass) std::make_heap(cands.begin(), cands.end(), later);
          std::pop_heap(cands.begin(), cands.end(), later);
        }
        const AskCandidate x = cands.back();
        cands.pop_back();
        AskKey k{x.effective, x.priority, x.lo->o.id};
        k.lo = x.lo;
        k.pool = x.pool;
        if (!fn(k)) return;
      }
      return;
    }
    std::vector<Head>& heads = scratch.heads;
    heads.clear();
    // Moves h to its next fitting key within the limit; false when it has none.
    const auto settle = [&](Head& h) {
      for (const It end = h.s->end(); h.it != end; ++h.it) {
        if (h.it->effective > limit) return false;
        if (window_fits(*h.it, ws, we)) {
          h.key = *h.it;
          h.version = h.s->version();
          return true;
        }
      }
      return false;
    };
    // The pools priced within the limit join the merge in the order of their cheapest spot key, each only once
    // the merge's least key is priced at that or more (none of its keys can come before), and are judged (run
    // bounds, constraints) only then: a walk that fn stops early (most that cross) neither judges nor reads the
    // pools priced above the keys it was given (~37 in 38 of those within the limit, realistic bench). Those
    // not opened yet are copied before fn is first called (into scratch.pools), as fn's fills move pools in
    // Book::spot_by_price. A pending pool is held by its LivePool, whose keys fn does not change (it changes only
    // the ask it was given, of an open pool).
    const SpotPool* next_pool = b.spot_by_price.data();
    const SpotPool* pools_end =
        next_pool + (std::upper_bound(b.spot_by_price.begin(), b.spot_by_price.end(), limit,
                                      [](Price p, const SpotPool& sp) { return p < sp.cheapest; }) -
                     b.spot_by_price.begin());
    bool pools_copied = false;
    const auto later = [](const Head& x, const Head& y) { return y.key < x.key; };  // min-heap on key
    const auto open_pools = [&] {
      while (next_pool != pools_end && (heads.empty() || next_pool->cheapest <= heads.front().key.effective)) {
        const LivePool& lp = *(next_pool++)->lp;
        if (!lp.spot_runs.may_fit(ws, we) || !pool_admits(b, lp, group, c, regions)) continue;
        const AskSet& s = lp.book_spot_asks;
        Head h{&s, s.begin(), {}, 0};
        if (!settle(h)) continue;
        heads.push_back(h);
        std::push_heap(heads.begin(), heads.end(), later);
      }
    };
    open_pools();
    while (!heads.empty()) {
      std::pop_heap(heads.begin(), heads.end(), later);
      Head h = heads.back();
      heads.pop_back();
      const AskKey k = h.key;
      ++h.it;
      const bool more = settle(h);
      if (next_pool != pools_end && !pools_copied) {
        scratch.pools.assign(next_pool, pools_end);
        next_pool = scratch.pools.data();
        pools_end = next_pool + scratch.pools.size();
        pools_copied = true;
      }
      if (!fn(k)) return;
      if (more) {
        if (h.version != h.s->version()) h.it = h.s->lower_bound(h.key);  // fn changed this set
        heads.push_back(h);
        std::push_heap(heads.begin(), heads.end(), later);
      }
      if (next_pool != pools_end) open_pools();
    }
  }

  // The group of constraints `c` (regions apart), made if need be in the slot of a listed group still without
  // users (which gives way: its sets, verdicts and key go), else in a new one.
  static int group_for(Book& b, const BidConstraints& c) {
    BidConstraints rep = c;
    rep.regions.clear();
    auto [it, inserted] = b.group_index.try_emplace(constraint_key(rep), -1);
    if (inserted) {
      BidGroup fresh;
      fresh.energy = has_energy(rep);
      fresh.rep = std::move(rep);
      BidGroup* slot = nullptr;
      while (!slot && !b.free_groups.empty()) {
        const int f = b.free_groups.back();
        b.free_groups.pop_back();
        BidGroup& g = b.bid_groups[static_cast<std::size_t>(f)];
        g.listed = false;
        // The unconstrained group never gives way (leave_group does not list it), though it may have been
        // listed before it became that group: a bid with regions only left it, then an unconstrained bid rested.
        if (g.users == 0 && f != b.unconstrained_group) {
          slot = &g;
          it->second = f;
        }
      }
      if (slot) {
        b.group_index.erase(constraint_key(slot->rep));
        fresh.gen = slot->gen + 1;
        *slot = std::move(fresh);
      } else {
        it->second = static_cast<int>(b.bid_groups.size());
        b.bid_groups.push_back(std::move(fresh));
      }
      b.made_slots[b.groups_made % Book::kMadeSlots] = static_cast<std::uint32_t>(it->second);
      ++b.groups_made;
    }
    return it->second;
  }

  // A bid ended: it leaves its group, listed in free_groups if it was the last.
  static void leave_group(Book& b, LiveOrder& lo) {
    const int gi = std::exchange(lo.bid_group, -1);
    BidGroup& g = b.bid_groups[static_cast<std::size_t>(gi)];
    if (--g.users > 0 || gi == b.unconstrained_group || g.listed) return;
    g.listed = true;
    b.free_groups.push_back(gi);
  }

  // pool_fits_spec(lp.p, g.rep), kept in g.
  bool group_fits_spec(const Book& b, const LivePool& lp, const BidGroup& g) const {
    return numbered_fits_spec(b, lp, book_number(b, lp), g);
  }
  // lp's number in b (verdicts' index), given one if it has none yet.
  static std::uint32_t book_number(const Book& b, const LivePool& lp) {
    if (lp.book_number == std::numeric_limits<std::uint32_t>::max()) lp.book_number = b.pools_numbered++;
    return lp.book_number;
  }
  // group_fits_spec for lp of book number `number` (groups_of asks it of every group with the number taken once).
  bool numbered_fits_spec(const Book& b, const LivePool& lp, std::uint32_t number, const BidGroup& g) const {
    if (g.verdicts.size() <= number) g.verdicts.resize(b.pools_numbered, -1);
    std::int8_t& v = g.verdicts[number];
    if (v < 0) v = pool_fits_spec(lp.p, g.rep) ? 1 : 0;
    return v == 1;
  }
  // What a kept verdict cannot keep: for a group with energy constraints, that the pool is verified now.
  bool group_verified(const LivePool& lp, const BidGroup& g) const { return !g.energy || pool_verified_for(lp.p, g.rep); }
  // pool_satisfies(lp.p, g.rep): the kept verdict, and for energy constraints the pool's verification now.
  bool group_admits(const Book& b, const LivePool& lp, const BidGroup& g) const {
    return group_fits_spec(b, lp, g) && group_verified(lp, g);
  }

  // The group of a bid's constraints (regions apart) if one is known, else null: the one cached for its
  // constraint set (a bid with equal constraints rested or walked), else the one of its key (constraint_key
  // leaves the regions out), then cached: a set whose bids have not rested, e.g. a resting one's with other
  // regions, would otherwise have every pool of its walks judged by pool_satisfies (~15,000 calls in the
  // realistic bench's timed part).
  const BidGroup* known_group(const Book& b, const RestOrder& bid) const {
    int g = bid.request.cons ? b.cached_group(&*bid.request.cons) : b.unconstrained_group;
    if (g < 0) {
      const auto it = b.group_index.find(constraint_key(bid.request.constraints()));
      if (it != b.group_index.end()) {
        g = it->second;
        if (bid.request.cons) b.cache_group(bid.request.cons, g);
      }
    }
    return g < 0 ? nullptr : &b.bid_groups[static_cast<std::size_t>(g)];
  }

  // pool_satisfies(lp.p, c), from the kept verdicts of c's group `g` (regions apart) and the numbers of c's
  // regions (region_numbers_of) when g is given. The kept verdict is read inline: a bid's walk asks for ~100
  // pools (realistic bench), ~50 instructions a call out of line.
  [[gnu::always_inline]] bool pool_admits(const Book& b, const LivePool& lp, const BidGroup* g,
                                          const BidConstraints& c, const RegionFilter& regions) const {
    if (g && lp.book_number < g->verdicts.size()) {
      const std::int8_t v = g->verdicts[lp.book_number];
      if (v >= 0) return v == 1 && group_verified(lp, *g) && regions.admits(lp.region);
    }
    return judge_pool(b, lp, g, c, regions);
  }
  [[gnu::noinline]] bool judge_pool(const Book& b, const LivePool& lp, const BidGroup* g, const BidConstraints& c,
                                    const RegionFilter& regions) const {
    if (!g) return pool_satisfies(lp.p, c);
    return group_admits(b, lp, *g) && regions.admits(lp.region);
  }

  // The least of the ask pools' spot_cheapest (kNoSpotAsk when none has a spot ask).
  static Price spot_floor(const Book& b) {
    return b.spot_by_price.empty() ? kNoSpotAsk : b.spot_by_price.front().cheapest;
  }

  // At least the price of every resting bid of `b` (see Book::duration_ceiling), the duration bids' best taken
  // again if an unbook made it stale.
  static Price bid_ceiling(const Book& b) {
    if (b.duration_ceiling_stale) {
      Price best(std::numeric_limits<std::int64_t>::min());
      const auto of = [&](const BidSets& s) {
        best = std::max(best, Price(s.duration_best));  // an empty set's kNoBid is best's start
      };
      for (const BidGroup& g : b.bid_groups) {
        if (g.resting == 0) continue;
        of(g.any);
        for (const auto& s : g.by_region) {
          if (s) of(*s);
        }
      }
      b.duration_ceiling = best;
      b.duration_ceiling_stale = false;
    }
    return std::max(b.duration_ceiling, b.fixed_ceiling);
  }

  // The groups of `b` that `lp` may satisfy: those whose kept verdict admits it (the caller asks group_verified
  // of each), in no order (bids_for's walk merges by key), brought up to date only when b's groups changed
  // (Book::groups_made): an ask's walk then passes over none of the ~3 in 4 groups its pool fails (realistic
  // bench: 7.6 admitted of 28).
  const std::vector<std::uint32_t>& groups_of(const Book& b, const LivePool& lp) const {
    if (lp.groups_seen == b.groups_made) return lp.groups_ok;
    if (lp.groups_seen != 0 && b.groups_made - lp.groups_seen <= Book::kMadeSlots) {
      // Only the slots given to groups since, each judged again: judging every group reads two lines a group
      // (its verdicts' vector and the verdict).
      const std::uint32_t number = book_number(b, lp);
      for (std::uint64_t m = lp.groups_seen; m != b.groups_made; ++m) {
        const std::uint32_t slot = b.made_slots[m % Book::kMadeSlots];
        std::erase(lp.groups_ok, slot);
        if (numbered_fits_spec(b, lp, number, b.bid_groups[slot])) lp.groups_ok.push_back(slot);
      }
    } else {
      lp.groups_ok.clear();
      // The groups through a pointer and a count taken once, and the pool's book number too (numbered_fits_spec):
      // the push_back writes memory, after which GCC loaded the vector's bounds again and divided out its size,
      // and group_fits_spec read the pool's number again, for every group (~36,700 in the realistic bench's
      // 20,000 commands, as pools are seen for the first time).
      const BidGroup* const groups = b.bid_groups.data();
      const std::size_t n = b.bid_groups.size();
      const std::uint32_t number = book_number(b, lp);
      for (std::size_t i = 0; i < n; ++i) {
        if (numbered_fits_spec(b, lp, number, groups[i])) lp.groups_ok.push_back(static_cast<std::uint32_t>(i));
      }
    }
    lp.groups_seen = b.groups_made;
    return lp.groups_ok;
  }

  // Sets up `walk` over the resting bids of `b` that `pool` satisfies (the groups it satisfies, their
  // bids without regions or naming the pool's region) priced at `floor` or more; duration bids only if
  // `with_duration`. Every key the walk returns then passes pool_satisfies(pool, its constraints).
  void bids_for(const Book& b, const LivePool& lp, Price floor, bool with_duration, BidWalk& walk) const {
    const std::uint32_t region = lp.region;
    // Inlined (GCC kept it out of line: ~62,000 calls of ~47 instructions in the realistic bench, a third of them
    // for sets priced out, which return at once).
    const auto add = [&](const BidSets& s) __attribute__((always_inline)) {
      if (with_duration && s.duration_best >= floor.value) walk.add(s.duration, floor);
      walk.add_fixed(s.fixed, floor);
    };
    // The groups through a pointer taken once (as in groups_of): add() writes the walk, after which GCC loaded
    // bid_groups' data again for every group.
    const std::vector<std::uint32_t>& ok = groups_of(b, lp);
    const BidGroup* const groups = b.bid_groups.data();
    for (const std::uint32_t gi : ok) {
      const BidGroup& g = groups[gi];
      if (g.resting == 0 || !group_verified(lp, g)) continue;
      add(g.any);
      if (region < g.by_region.size() && g.by_region[region]) add(*g.by_region[region]);
    }
    walk.start();
  }

  // A resting fixed-window bid's entry in its group's BidIndex (or indexes: one per region it names).
  static BidEntry bid_entry(const LiveOrder& lo) {
    return BidEntry{lo.o.request.price, lo.o.priority(), const_cast<LiveOrder*>(&lo), lo.o.window_start,
                    lo.o.window_end()};
  }
  template <class F>
  void for_each_bid_index(Book& b, const LiveOrder& lo, F&& f) {
    BidGroup& g = b.bid_groups[static_cast<std::size_t>(lo.bid_group)];
    const std::vector<std::string>& regions = lo.o.request.constraints().regions;
    if (regions.empty()) {
      f(g.any.fixed);
    } else {
      for (std::uint32_t r : region_nums(lo.o)) f(by_number(g.by_region, r).fixed);
    }
  }
  void index_bid(Book& b, const LiveOrder& lo) {
    const BidEntry e = bid_entry(lo);
    const std::int64_t start_week = run_slot(e.start);
    const std::int64_t end_week = run_slot(e.end);
    for_each_bid_index(b, lo, [&](BidIndex& ix) {
      auto row = ix.rows.begin() + (ix.row_from(start_week) - ix.rows.cbegin());
      if (row == ix.rows.end() || row->start_week != start_week) row = ix.rows.insert(row, BidRow{start_week, kNoBid, {}});
      auto cell = std::partition_point(row->cells.begin(), row->cells.end(),
                                       [&](const BidCell& c) { return c.end_week < end_week; });
      if (cell == row->cells.end() || cell->end_week != end_week) cell = row->cells.insert(cell, BidCell{end_week, {}, kNoBid});
      if (!cell->bids.insert(e)) throw std::logic_error("fixed bid index: entry already in");
      ++ix.version;
      cell->best = std::max(cell->best, e.price.value);
      row->best = std::max(row->best, e.price.value);
      ix.best = std::max(ix.best, e.price.value);
      ++ix.size;
    });
  }
  void unindex_bid(Book& b, const LiveOrder& lo) {
    const BidEntry e = bid_entry(lo);
    for_each_bid_index(b, lo, [&](BidIndex& ix) {
      const auto [crow, ccell] = ix.find(run_slot(e.start), run_slot(e.end));
      if (!ccell) throw std::logic_error("fixed bid index: no cell");
      auto row = ix.rows.begin() + (crow - ix.rows.data());
      auto cell = row->cells.begin() + (ccell - row->cells.data());
      if (!cell->bids.erase(e)) throw std::logic_error("fixed bid index: no entry");
      --ix.size;
      ++ix.version;
      if (cell->bids.empty()) {
        row->cells.erase(cell);
      } else {
        cell->best = cell->bids.begin()->price.value;
      }
      if (row->cells.empty()) {
        ix.rows.erase(row);
      } else if (e.price.value == row->best) {
        row->refresh_best();  // it may have been the row's highest
      }
      if (e.price.value == ix.best) ix.refresh_best();  // it may have been the highest
    });
  }

  // BidWalk's vectors (its candidates and its duration heads), one pair per nesting depth, reused (a fresh vector per
  // walk was a malloc).
  mutable std::deque<BidWalk::Lists> bid_lists;
  mutable std::size_t bid_depth{0};
  class BidList {
   public:
    explicit BidList(const Impl& i) : depth_(i.bid_depth) {
      if (depth_ == i.bid_lists.size()) i.bid_lists.emplace_back();
      list_ = &i.bid_lists[depth_++];
    }
    ~BidList() { --depth_; }
    BidList(const BidList&) = delete;
    BidList& operator=(const BidList&) = delete;
    BidWalk::Lists& get() { return *list_; }

   private:
    std::size_t& depth_;
    BidWalk::Lists* list_{nullptr};
  };

  // Takes an order out of the book and the account sums before it changes. Returns whether it rested.
  //
  // `keep`: a fill's maker, whose key keeps its order (price, priority, id) through the fill, stays in its book
  // sets where it is; only what the fill changes is taken out (a bid's account sums; an ask adds only itself to
  // its account's open orders, which a fill does not change, so it stays counted); an ask's runs stay in the
  // RunIndex, the one the fill takes from (`fill_start`: the fill's window's start) remembered (keep_run). The
  // next hook() puts the sums back, refreshes the ask's key in place and re-indexes the runs the fill changed,
  // or, if the fill ended the order, takes the rest out: the same book as an erase and a re-insert, without them.
  bool unhook(LiveOrder& lo, bool keep = false, Seconds fill_start = Seconds(0)) {
    const bool was = lo.in_book;
    if (lo.in_book && keep) {
      lo.kept = true;
      if (lo.o.is_sell()) {
        keep_run(lo, fill_start);
        return was;
      }
    } else if (lo.in_book) {
      unbook(lo, true);
    }
    if (lo.counted) {
      account_add(lo, -1);
      lo.counted = false;
    }
    return was;
  }

  // A longest run as AskKey::max_run keeps it: kAnyRun (no bound) when it does not fit in 32 bits.
  static std::int32_t max_run_of(std::int64_t longest) {
    return longest >= kAnyRun ? kAnyRun : static_cast<std::int32_t>(longest);
  }

  // A resting ask's key in its book sets, with its free runs summarized. `as_placed` (hook()'s): its free capacity
  // is its quantity, a whole number of lots, over all of its window, so its one run is the window: no pass over
  // its pieces (summarize_runs() would find the same).
  static AskKey ask_key(LiveOrder& lo, LivePool& lp, bool as_placed = false) {
    const RestOrder& o = lo.o;
    const Seconds we = o.window_end();
    AskKey k{o.ask_effective_price(), o.priority(), o.id, &lo, &lp, o.window_start, we, o.ask_min_duration()};
    if (as_placed) {
      const std::int64_t longest = (we - o.window_start).value;
      k.run_lead = 0;
      k.run_tail = 0;
      k.max_run = max_run_of(longest);
    } else {
      summarize_runs(o, k);
    }
    return k;
  }

  // A key in its pool's spot set counted in the set's summary (run bounds, cheapest).
  static void count_spot(Book& b, AskPool& ap, LivePool& lp, const AskKey& k) {
    lp.spot_runs.widen(k);
    if (k.effective < ap.spot_cheapest) set_spot_cheapest(b, ap, k.effective);
  }

  // An ask's key out of its pool's spot set, and the set's summary (run bounds, cheapest) brought up to date.
  static void erase_spot(Book& b, AskPool& ap, LivePool& lp, const AskKey& k) {
    lp.book_spot_asks.erase(k);
    if (lp.book_spot_asks.empty()) {
      lp.spot_runs = RunBounds{};
      set_spot_cheapest(b, ap, kNoSpotAsk);
    } else {
      set_spot_cheapest(b, ap, lp.book_spot_asks.begin()->effective);
    }
  }

  // ap's spot_cheapest set to p (kNoSpotAsk: none), and its entry in Book::spot_by_price moved with it.
  static void set_spot_cheapest(Book& b, AskPool& ap, Price p) {
    if (p == ap.spot_cheapest) return;
    std::vector<SpotPool>& v = b.spot_by_price;
    const SpotPool to{p, ap.lp};
    if (ap.spot_cheapest == kNoSpotAsk) {
      v.insert(std::lower_bound(v.begin(), v.end(), to), to);
    } else {
      // Moved by shifting only the entries it passes (none, when its neighbours still bound it).
      const auto at = std::lower_bound(v.begin(), v.end(), SpotPool{ap.spot_cheapest, ap.lp});
      if (p == kNoSpotAsk) {
        v.erase(at);
      } else if (to < *at) {
        const auto dest = std::lower_bound(v.begin(), at, to);
        std::move_backward(dest, at, at + 1);
        *dest = to;
      } else {
        const auto dest = std::lower_bound(at + 1, v.end(), to);
        std::move(at + 1, dest, at);
        *(dest - 1) = to;
      }
    }
    ap.spot_cheapest = p;
  }

  // The book part of unhook(): out of its sets (and, if `runs`, its runs out of the RunIndex).
  void unbook(LiveOrder& lo, bool runs) {
    Book& b = (*lo.o.book);
    if (lo.o.is_buy()) {
      const BidKey k{lo.o.request.price, lo.o.priority(), lo.o.id};
      const bool dur = lo.o.is_duration_bid();
      BidGroup& g = b.bid_groups[static_cast<std::size_t>(lo.bid_group)];
      --g.resting;
      const std::vector<std::string>& regions = lo.o.request.constraints().regions;
      if (dur && k.price == b.duration_ceiling) b.duration_ceiling_stale = true;
      if (!dur && --b.fixed_bids == 0) b.fixed_ceiling = Price(std::numeric_limits<std::int64_t>::min());
      if (!dur) {
        unindex_bid(b, lo);
      } else if (regions.empty()) {
        erase_duration(g.any, k);
      } else {
        for (std::uint32_t r : region_nums(lo.o)) erase_duration(by_number(g.by_region, r), k);
      }
    } else {
      const AskKey k{lo.o.ask_effective_price(), lo.o.priority(), lo.o.id};
      LivePool* lp = lo.pool();
      if (runs) unindex_runs(b, lo);
      AskPool& ap = b.ask_pools[lp->ask_pool_slot];
      if (lo.in_spot) erase_spot(b, ap, *lp, k);
      if (--lp->book_count == 0) {
        const std::uint32_t i = lp->ask_pool_slot;
        if (i + 1 != b.ask_pools.size()) {
          b.ask_pools[i] = std::move(b.ask_pools.back());
          b.ask_pools[i].lp->ask_pool_slot = i;
        }
        b.ask_pools.pop_back();
      }
      lo.in_spot = false;
    }
    lo.in_book = false;
    lo.kept = false;
  }

  // hook() of a kept order (unhook(lo, true)) still open: an ask's key refreshed in its set (its run summary,
  // whether a duration bid could use it now) and its runs in the RunIndex brought up to date, as an erase and a
  // re-insert would leave them; a bid's key did not change.
  void rebook_kept(LiveOrder& lo) {
    lo.kept = false;
    RestOrder& o = lo.o;
    if (o.is_buy()) return;
    Book& b = (*o.book);
    LivePool& lp = *lo.pool();
    const AskKey k = ask_key(lo, lp);
    const bool spot = spot_now(o);
    AskPool& ap = b.ask_pools[lp.ask_pool_slot];
    if (lo.in_spot && spot) {
      if (lp.book_spot_asks.size() == 1) lp.spot_runs = RunBounds{};  // as the erase of its only key would
      lp.book_spot_asks.replace(k);
    } else if (lo.in_spot) {
      erase_spot(b, ap, lp, k);
    } else if (spot) {
      lp.book_spot_asks.insert(k);
    }
    if (spot) count_spot(b, ap, lp, k);
    lo.in_spot = spot;
    settle_kept_runs(lo);
  }

  // Calls f(from, to) for each run of an ask's free capacity: a maximal stretch of adjacent pieces with at
  // least one lot (min_chunk) free, in time order (the runs summarize_runs summarizes).
  template <class F>
  static void for_each_run(const RestOrder& a, F&& f) {
    const std::int64_t lot = a.request.min_chunk.value;
    bool in_run = false;
    Seconds from{};
    Seconds last{};
    for (const Step& p : a.ask->free.pieces()) {
      if (p.gpus < lot) {
        if (in_run) f(from, last);
        in_run = false;
        continue;
      }
      if (in_run && p.from != last) {
        f(from, last);
        in_run = false;
      }
      if (!in_run) from = p.from;
      in_run = true;
      last = p.to;
    }
    if (in_run) f(from, last);
  }

  // The index's entry for one run of a resting ask (its pool numbered already); nullopt for a run that can
  // hold no window of the index's range (0 <= ws < we <= kRunMax), which is not indexed.
  static std::optional<RunEntry> run_entry(const LiveOrder& lo, Seconds from, Seconds to) {
    if (to.value <= 0 || from.value >= kRunMax) return std::nullopt;
    const auto u32 = [](std::int64_t v, std::int64_t hi) {
      return static_cast<std::uint32_t>(std::clamp<std::int64_t>(v, 0, hi));
    };
    return RunEntry{lo.o.ask_effective_price(), lo.o.priority(), const_cast<LiveOrder*>(&lo), u32(from.value, kRunMax),
                    u32(to.value, kRunMax), u32(lo.o.ask_min_duration().value, kRunMax + 1), lo.pool()->run_number,
                    lo.o.request.min_chunk.value == 1 ? 1U : 0U};
  }

  // Puts a resting ask's runs into its book's RunIndex (hook) or takes them out (unhook; its free capacity
  // is what it was when hooked).
  static void index_runs(const Book& b, LiveOrder& lo) {
    RunIndex& ix = b.free_runs;
    if (!ix.enabled) return;
    const LivePool* lp = lo.pool();
    if (lp->run_number == std::numeric_limits<std::uint32_t>::max()) {
      lp->run_number = static_cast<std::uint32_t>(ix.pools.size());
      ix.pools.push_back(lp);
      ix.marks.emplace_back();
      ix.region_bit_numbers.push_back(region_bit_number(lp->region));
    }
    for_each_run(lo.o, [&](Seconds from, Seconds to) {
      if (const std::optional<RunEntry> e = run_entry(lo, from, to)) index_run(ix, lp, *e);
    });
  }
  static void unindex_runs(Book& b, LiveOrder& lo) {
    RunIndex& ix = b.free_runs;
    if (!ix.enabled) return;
    for_each_run(lo.o, [&](Seconds from, Seconds to) {
      if (const std::optional<RunEntry> e = run_entry(lo, from, to)) unindex_run(ix, lo.pool(), *e);
    });
  }
  static void index_run(RunIndex& ix, const LivePool* lp, const RunEntry& e) {
    const RunCellRef at = ix.cell_for(e);
    const std::size_t t = tier_index(lp->p.spec.tier);
    RunSet& set = at.cell->by_tier[t];
    if (!set.insert(e)) throw std::logic_error("free run index: entry already in");
    at.cell->regions[t] |= ix.region_of(e);
    at.lower(t, e.effective.value);
    ++at.row->size;
    ++ix.size;
  }
  static void unindex_run(RunIndex& ix, const LivePool* lp, const RunEntry& e) {
    const RunCellRef at = ix.find(e);
    if (!at.cell) throw std::logic_error("free run index: no cell");
    const std::size_t t = tier_index(lp->p.spec.tier);
    RunSet& set = at.cell->by_tier[t];
    if (!set.erase(e)) throw std::logic_error("free run index: no entry");
    // The tier's regions recomputed when its set is one chunk, which the erase just read and moved; a set of
    // more keeps them (a search of every chunk for the run's region, most of them not in cache, made the erases
    // cost more misses than the scans saved).
    if (set.chunks().size() <= 1) at.cell->regions[t] = regions_of(ix, set);
    at.refresh(t);
    --at.row->size;
    --ix.size;
  }

  // The region_bit of each pool of `set`'s runs.
  static std::uint64_t regions_of(const RunIndex& ix, const RunSet& set) {
    std::uint64_t regions = 0;
    for (const std::vector<RunEntry>& chunk : set.chunks()) {
      for (const RunEntry& e : chunk) regions |= ix.region_of(e);
    }
    return regions;
  }

  // An entry of `cell` overwritten by another of the same ask that sorts where it did (settle_kept_runs): nothing
  // else of the cell changes (its size, its least price).
  static void reindex_run(RunCell* cell, const LivePool* lp, const RunEntry& was, const RunEntry& now) {
    if (!cell || !cell->by_tier[tier_index(lp->p.spec.tier)].replace(was, now)) {
      throw std::logic_error("free run index: no entry");
    }
  }

  // A fill's maker ask stays in the RunIndex while the fill changes it (unhook(lo, true)). A fill takes GPUs
  // over a window where at least a lot stayed free throughout (it takes whole lots), i.e. from inside one run,
  // and changes the ask's free capacity nowhere else, so that run is the only one it can change (runs end
  // where less than a lot is free, which the fill leaves as it was): the run is remembered here, its span and
  // its entry as indexed (one ask at a time), and settle_kept_runs() then puts the runs now free within that
  // span in its place, or takes all out if the fill ended the ask.
  const LiveOrder* kept_ask{nullptr};
  Seconds kept_from;
  Seconds kept_to;
  std::optional<RunEntry> kept_entry;  // nullopt: the run is not indexed (no RunIndex, or out of its range)
  std::vector<RunEntry> fresh_runs;    // settle_kept_runs()'s scratch
  // preempt_candidates' scratch: each admitted spot pool's place in its leases and the candidate there.
  struct PreemptHead {
    ChunkedSet<LeaseRef, std::less<LeaseRef>>::const_iterator at;
    ChunkedSet<LeaseRef, std::less<LeaseRef>>::const_iterator end;
    const LivePool* lp{nullptr};
    PreemptCandidate next{};
  };
  mutable std::vector<PreemptHead> preempt_heads;

  // `at`: the start of the fill's window.
  void keep_run(const LiveOrder& lo, Seconds at) {
    if (kept_ask) throw std::logic_error("free run index: two asks kept at once");
    kept_ask = &lo;
    kept_entry.reset();
    if (!lo.o.book->free_runs.enabled) return;
    bool found = false;
    for_each_run(lo.o, [&](Seconds from, Seconds to) {
      if (from > at || to <= at) return;
      found = true;
      kept_from = from;
      kept_to = to;
      kept_entry = run_entry(lo, from, to);
    });
    if (!found) throw std::logic_error("free run index: a fill outside the ask's runs");
  }

  // The RunIndex brought up to date for a kept ask (hook() after the fill): an open ask's runs within the kept
  // span as they are now in place of the kept one; a closed ask's every run out.
  void settle_kept_runs(const LiveOrder& lo) {
    if (kept_ask != &lo) throw std::logic_error("free run index: not the kept ask");
    kept_ask = nullptr;
    RunIndex& ix = lo.o.book->free_runs;
    if (!ix.enabled) return;
    // An open ask's runs inside the kept span (new, or the kept one unchanged); a closed ask's outside it (as
    // indexed: the fill did not change them). The runs now inside it were never indexed.
    const bool open = lo.o.is_open();
    fresh_runs.clear();
    for_each_run(lo.o, [&](Seconds from, Seconds to) {
      if ((from >= kept_from && to <= kept_to) != open) return;
      if (const std::optional<RunEntry> e = run_entry(lo, from, to)) fresh_runs.push_back(*e);
    });
    if (!open) {
      if (kept_entry) unindex_run(ix, lo.pool(), *kept_entry);
      for (const RunEntry& e : fresh_runs) unindex_run(ix, lo.pool(), e);
      return;
    }
    // The kept entry stays if a new run equals it (the fill left the run as it was). Else a new run in its cell
    // takes its place (the left part of a run the fill split, most often): the ask's other runs lie outside the
    // kept span and share its priority (and price, unless that changed), so no entry sorts between the two, where
    // an erase and an insert would shift the cell's later entries down and up again. Else it goes out, before the
    // inserts (a new run may sort equal to it: the same start).
    const RunEntry* placed = nullptr;  // the new run the index holds already
    if (kept_entry) {
      const auto same = std::find(fresh_runs.begin(), fresh_runs.end(), *kept_entry);
      if (same != fresh_runs.end()) {
        placed = &*same;
      } else {
        for (const RunEntry& e : fresh_runs) {
          // (priority and order are the kept entry's, as said above, so they are not compared here; the
          // differential test's check_invariants checks every cell's order after each command)
          if (e.effective == kept_entry->effective && RunIndex::same_weeks(e, *kept_entry)) {
            placed = &e;
            break;
          }
        }
        if (placed) {
          reindex_run(ix.find(*kept_entry).cell, lo.pool(), *kept_entry, *placed);
        } else {
          unindex_run(ix, lo.pool(), *kept_entry);
        }
      }
    }
    for (const RunEntry& e : fresh_runs) {
      if (&e != placed) index_run(ix, lo.pool(), e);
    }
  }

  // Fills an ask key's run summary from the ask's free capacity: the runs of time with at least one lot
  // free (adjacent pieces joined), their hull and the longest of them. No run: nothing fits.
  static void summarize_runs(const RestOrder& a, AskKey& k) {
    const std::int64_t lot = a.request.min_chunk.value;
    bool any = false;
    bool in_run = false;
    Seconds first{};
    Seconds last{};
    Seconds run_from{};
    std::int64_t longest = 0;
    for (const Step& p : a.ask->free.pieces()) {
      if (p.gpus < lot) {
        in_run = false;
        continue;
      }
      if (!in_run || p.from != last) run_from = p.from;
      if (!any) first = p.from;
      any = in_run = true;
      last = p.to;
      longest = std::max(longest, (p.to - run_from).value);
    }
    const auto clamp32 = [](std::int64_t v) {
      return static_cast<std::int32_t>(std::clamp<std::int64_t>(v, 0, kAnyRun - 1));
    };
    if (!any) {  // an empty hull: [start, start) holds no window
      k.run_lead = 0;
      k.run_tail = clamp32((k.end - k.start).value);
      k.max_run = 0;
      return;
    }
    // Clamping lead and tail down keeps the hull a superset (a true bound).
    k.run_lead = clamp32((first - k.start).value);
    k.run_tail = clamp32((k.end - last).value);
    k.max_run = max_run_of(longest);
  }

  // Puts a changed order back (if still open), refreshes its view and timer; ends a terminal one.
  void hook(LiveOrder& lo, bool into_book) {
    RestOrder& o = lo.o;
    if (o.is_open()) {
      // Counted and not unhooked since on(PlaceOrder) (an incoming order entering the book): its sums are in,
      // and an ask's accounting is as on(PlaceOrder) set it, at this `now`. A fill's kept maker ask stays
      // counted too (unhook), but the fill changed its accounting.
      const bool as_placed = lo.counted && !lo.kept;
      if (!lo.counted) {
        account_add(lo, +1);
        lo.counted = true;
      }
      if (lo.kept) {
        rebook_kept(lo);
      } else if (into_book) {
        Book& b = (*o.book);
        if (o.is_buy()) {
          const bool dur = o.is_duration_bid();
          const BidKey k{o.request.price, o.priority(), o.id, &lo, o.window_start, o.window_end(),
                         dur ? *o.request.duration() : Seconds(0)};
          if (lo.bid_group < 0) {
            if (o.request.cons) {
              lo.bid_group = b.cached_group(&*o.request.cons);
              if (lo.bid_group < 0) {
                lo.bid_group = group_for(b, *o.request.cons);
                b.cache_group(o.request.cons, lo.bid_group);
              }
            } else {  // most bids: no key to build
              if (b.unconstrained_group < 0) b.unconstrained_group = group_for(b, RestRequest::no_constraints());
              lo.bid_group = b.unconstrained_group;
            }
            ++b.bid_groups[static_cast<std::size_t>(lo.bid_group)].users;  // until it ends (leave_group)
          }
          BidGroup& g = b.bid_groups[static_cast<std::size_t>(lo.bid_group)];
          ++g.resting;
          Price& ceiling = dur ? b.duration_ceiling : b.fixed_ceiling;
          ceiling = std::max(ceiling, k.price);
          const std::vector<std::string>& regions = o.request.constraints().regions;
          if (!dur) {
            ++b.fixed_bids;
            index_bid(b, lo);
          } else if (regions.empty()) {
            insert_duration(g.any, k);
          } else {
            for (std::uint32_t r : region_nums(o)) insert_duration(by_number(g.by_region, r), k);
          }
        } else {
          LivePool& lp = *lo.pool();
          const AskKey k = ask_key(lo, lp, as_placed);
          // An ask as placed offers its quantity over all of its window, which has not ended (validate()): it
          // is spot now when its window has started (spot_now() without its read of the free capacity).
          lo.in_spot = as_placed ? o.window_start <= now : spot_now(o);
          if (lp.book_count++ == 0) {
            lp.ask_pool_slot = static_cast<std::uint32_t>(b.ask_pools.size());  // at most one a pool (add_pool)
            b.ask_pools.push_back(AskPool{&lp, kNoSpotAsk});
          }
          AskPool& ap = b.ask_pools[lp.ask_pool_slot];
          if (lo.in_spot) {
            lp.book_spot_asks.insert(k);
            count_spot(b, ap, lp, k);
          }
          index_runs(b, lo);
        }
        lo.in_book = true;
      }
      if (!as_placed) refresh_ask_accounting(o);
      refresh_view(lo, as_placed);
      schedule_order(lo);
      return;
    }
    if (lo.kept) {
      if (o.is_sell()) settle_kept_runs(lo);  // its runs out
      unbook(lo, false);
    }
    if (lo.counted) {  // a kept ask the fill ended
      account_add(lo, -1);
      lo.counted = false;
    }
    unshow(lo);
    if (lo.timer == LiveOrder::kClosed) return;
    lo.timer = LiveOrder::kClosed;
    if (o.is_sell()) close_ask(lo);
    if (o.is_buy() && lo.bid_group >= 0) leave_group(*o.book, lo);
    account(o.account).orders.remove<account_slot>(orders, lo);
    if (o.request.has_client_order_id()) {
      const CidKey k{o.account, o.request.cold->client_order_id};
      open_cids.erase(k);
      finished_cids[k] = Finished{to_order(o), o.body_hash(), seq};
    }
    dead.push_back(&lo);
  }

  // An ask ended: its free capacity ahead leaves the pool and is reported as cancelled GPU-seconds.
  void close_ask(LiveOrder& lo) {
    RestOrder& a = lo.o;
    AskSide& s = *a.ask;
    LivePool& lp = *lo.pool();
    const Seconds from = std::max(now, a.window_start);
    const Seconds we = a.window_end();
    std::int64_t past;
    std::int64_t rest;
    if (s.free.pieces().size() == 1) {
      // One piece (an ask no fill has split, most of those cancelled): Steps::integral's shortcut spelled out
      // here, as GCC calls integral() out of line in hook() (a call each, ~15 instructions), and no loop.
      const Step p = s.free.pieces()[0];
      past = p.gpu_seconds(a.window_start, std::min(from, we));
      rest = p.gpu_seconds(from, we);
      if (p.to > from) lp.used.add(std::max(p.from, from), p.to, -p.gpus);
    } else {
      past = s.free.integral(a.window_start, std::min(from, we));
      rest = s.free.integral(from, we);
      for (const Step& p : s.free.pieces()) {
        if (p.to <= from) continue;
        lp.used.add(std::max(p.from, from), p.to, -p.gpus);
      }
    }
    s.free.clear_from(from);
    s.lapsed_gpu_seconds = past;
    s.cancelled_gpu_seconds += rest;  // the unsold rest ahead, however the ask ended
    a.free_gpu_seconds = 0;
    lp.asks.remove<pool_slot>(orders, lo);
    for (LeaseId lid : s.sold) {
      auto it = leases.find(lid);
      if (it == leases.end()) continue;
      set_ask_list_price(*it, a.request.price);
      it->set_ask_withdrawn(a.status == OrderStatus::cancelled || a.status == OrderStatus::expired);
    }
  }

  void finish_order(LiveOrder& lo, OrderStatus status, Reason reason, bool announce) {
    unhook(lo);
    lo.o.status = status;
    lo.o.reason = reason;
    lo.o.set_updated_at(now);
    hook(lo, false);
    if (announce) emit_order<OrderDone>(lo.o);
  }

  void announce_state(const LiveOrder& lo) {
    if (lo.o.is_open()) {
      emit_order<OrderUpdated>(lo.o);
    } else {
      emit_order<OrderDone>(lo.o);
    }
  }

  // ---------------------------------------------------------------- leases

  // The lease trade `t` creates (its buyer, orders, GPUs, window, prices and bucket are the trade's: one bucket
  // computed a fill); `ask`: the ask it sells from (null for a preemption's, which takes the ask's terms from the
  // preempted lease).
  LiveLease& new_lease(LivePool& lp, const Trade& t, const RestOrder* ask) {
    const LeaseId id(next_lease++);
    const auto at = leases.emplace_new(id);  // built in its slot: no LiveLease moved in
    LiveLease& l = *at;
    l.id = id;
    l.pool = lp.number;
    l.sell_order = t.sell_order;
    l.quantity = Qty32(t.quantity);
    l.start = t.start;
    l.end = t.end;
    l.price = t.price;
    set_trade_fields(l, t.buyer, t.id, t.buy_order, t.list_price, lp.p.green_discount_bps, t.bucket);
    l.interruptible = lp.p.spec.tier == Tier::spot;
    l.status = t.start <= now ? LeaseStatus::active : LeaseStatus::reserved;
    set_ends_at(l, t.end);
    if (ask) {
      set_ask_terms(l, ask->window_start, ask->window_end(), ask->ask_min_duration(), ask->request.min_chunk);
      set_ask_list_price(l, ask->request.price);
    }
    set_owed(l, cost(t.price, t.quantity, t.end - t.start));
    add_to_pool(l, at.slot_number());
    schedule_lease(l);
    return l;
  }

  // A live lease (in `slot` of `leases`) into its pool's lists (leave_pool: out, when it ends).
  void add_to_pool(LiveLease& l, std::uint32_t slot) {
    LivePool& lp = pool_of(l);
    l.pool_slot = static_cast<std::uint32_t>(lp.leases.size());
    lp.leases.push_back(slot);
    if (lp.p.spec.tier == Tier::spot) lp.spot_leases.insert(LeaseRef(l));
  }
  void leave_pool(LiveLease& l) {
    LivePool& lp = pool_of(l);
    const std::uint32_t last = lp.leases.back();
    lp.leases[l.pool_slot] = last;
    leases.at_slot(last).pool_slot = l.pool_slot;
    lp.leases.pop_back();
    if (lp.p.spec.tier == Tier::spot) lp.spot_leases.erase(LeaseRef(l));
  }

  // Bills what the lease owes and ends it.
  void end_lease(LiveLease& l) {
    const Micros bill = l.amount;
    set_owed(l, 0);     // out of the buyer's notional
    l.amount = bill;    // kept as the bill (owed() is 0 once ended)
    l.ended = true;
    leave_pool(l);
  }

  // ---------------------------------------------------------------- fills

  // The fields every fill's trade takes from the pool and the bid, written into a default Trade (execute_fill's
  // is already in its event: no Trade moved in).
  void base_trade(Trade& t, const LivePool& lp, const RestOrder& bid, Qty qty, Seconds ws, Seconds we, Price price,
                  Side taker) {
    t.id = TradeId(next_trade++);
    t.market = lp.p.spec.market;
    t.bucket = trade_bucket(ws);
    t.time = now;
    t.buy_order = bid.id;
    t.buyer = bid.account;
    t.seller = lp.p.provider;
    t.pool = lp.p.id;
    t.quantity = qty;
    t.start = ws;
    t.end = we;
    t.price = price;
    t.green_discount_bps = lp.p.green_discount_bps;
    t.tier = lp.p.spec.tier;
    t.region = lp.p.spec.region;
    t.green_tier = lp.p.green_tier;
    t.taker = taker;
  }

  void set_fill_status(RestOrder& o) {
    if (o.is_buy()) {
      o.status = o.remaining.value == 0 ? OrderStatus::filled : OrderStatus::partially_filled;
    } else {
      o.status = ask_has_piece(o) ? OrderStatus::partially_filled : OrderStatus::filled;
    }
    o.set_updated_at(now);
  }

  // One fill between a bid and an ask; `taker` is the incoming side. Emits the trade, the lease and
  // the maker's new state.
  //
  // The taker (in no book) is hooked back only when the fill ended it: while it is still open, its caller
  // hooks it once after its walk (a placement, an amend, a woken ask), so a taker filled k times pays for one
  // account update, view check and timer, not k. Until then it is out of its account's sums (its first
  // fill's unhook took it out; the later ones find nothing to take), which nothing reads during a walk.
  void execute_fill(LiveOrder& bid, LiveOrder& ask, Qty q, Seconds ws, Seconds we, Price price, Side taker) {
    const bool bid_in = unhook(bid, true);  // the maker stays in its place (the taker is in no book)
    const bool ask_in = unhook(ask, true, ws);
    ask.o.ask->free.add(ws, we, -q.value);
    if (ask.o.ask->free.min(ws, we) < 0) throw std::logic_error("ask oversold");
    ask.o.filled_gpu_seconds += q.value * (we - ws).value;
    bid.o.filled += q;
    bid.o.remaining -= q;
    LivePool& lp = *ask.pool();
    // The trade is built in its event, the fill's first (`t` is used only until the next one is emitted).
    Trade& t = std::get<TradeEvent>(push_event<TradeEvent>()).trade;
    base_trade(t, lp, bid.o, q, ws, we, price, taker);
    t.sell_order = ask.o.id;
    t.list_price = ask.o.request.price;
    LiveLease& l = new_lease(lp, t, &ask.o);
    add_sold(ask, l.id);
    t.lease = l.id;
    set_fill_status(bid.o);
    set_fill_status(ask.o);
    emit_lease(l);
    const bool bid_takes = taker == Side::buy;
    if (!bid_takes || !bid.o.is_open()) hook(bid, bid_in);  // the maker always, the taker if it ended
    if (bid_takes || !ask.o.is_open()) hook(ask, ask_in);
    announce_state(taker == Side::buy ? ask : bid);
  }

  // The leases an interruptible bid of `need` GPUs preempts, in the order it takes them: by the lease's price, then
  // its id, each with the most it can take and the lot, as far as the one that covers `need` (every caller takes
  // PreemptCandidate::take of each, passes over those it takes none of, and stops when nothing is left). Each
  // admitted spot pool's leases are in that order already (spot_leases), so the pools are merged by a heap of
  // their next fitting lease: a bid that a few leases cover reads those and each pool's first fitting one, not
  // every lease priced below it in every pool (they pile up over a long run, and collecting and sorting them all
  // took 3 % of the realistic bench's 1,000,000 commands).
  std::vector<PreemptCandidate> preempt_candidates(const RestOrder& bid, Qty need) const {
    std::vector<PreemptCandidate> found;
    const BidConstraints& c = bid.request.constraints();
    if (need.value <= 0 || !c.interruptible || c.single_pool || bid.request.post_only) return found;
    const Seconds notice_end = now + cfg.preempt_notice;
    Seconds ws;
    Seconds we;
    if (bid.is_duration_bid()) {
      ws = notice_end;
      we = notice_end + *bid.request.duration();
    } else {
      if (bid.window_start < notice_end) return found;
      ws = bid.window_start;
      we = bid.window_end();
    }
    const Book& book = (*bid.book);
    const Price tk = book.spec.tick;
    // A pool's next lease the bid can take, from `h.at` on (its candidate in h.next): false when none is left below
    // the bid's price.
    const auto advance = [&](PreemptHead& h) {
      for (; h.at != h.end; ++h.at) {
        const LeaseRef& ref = *h.at;
        if (ref.price >= bid.request.price) return false;  // the rest cost as much or more
        if (ws < std::max(ref.start, notice_end) || we > ref.end) continue;  // the freed GPUs must cover it
        const LiveLease& l = *ref.l;
        if (!l.interruptible || l.ended || buyer(l) == bid.account) continue;  // not one's own lease
        if (l.status != LeaseStatus::reserved && l.status != LeaseStatus::active) continue;
        if (l.price >= bid.request.price || l.ask_withdrawn()) continue;
        if (ws < ask_window_start(l) || we > ask_window_end(l) || we - ws < ask_min_duration(l)) continue;
        const Price eff = discounted(preemption_list_price(l), h.lp->p.green_discount_bps, tk);
        const Price price = std::max(eff, l.price + tk);
        if (price > bid.request.price) continue;
        const std::int64_t lot = std::lcm(bid.request.min_chunk.value, ask_min_chunk(l).value);
        h.next = PreemptCandidate{l.id, l.quantity, Qty(lot), ws, we, price, l.price};
        return true;
      }
      return false;
    };
    // pool_satisfies(pool, c) for each spot pool, from the kept verdicts of the bid's group when it is known (as
    // walk_asks judges pools).
    const BidGroup* group = known_group(book, bid);
    std::vector<std::uint32_t> region_nums_buf;
    const RegionFilter regions(group && !c.regions.empty() ? known_region_nums(bid, region_nums_buf) : region_nums_buf);
    std::vector<PreemptHead>& heads = preempt_heads;
    heads.clear();
    for (const auto& [pid, pp] : book.spot_pools) {
      const LivePool& lp = *pp;
      if (!pool_admits(book, lp, group, c, regions)) continue;
      if (lp.p.provider == bid.account) continue;  // never trade with oneself, even through a lease
      PreemptHead h{lp.spot_leases.begin(), lp.spot_leases.end(), &lp, {}};
      if (advance(h)) heads.push_back(h);
    }
    // A min-heap by (lease price, lease id): the order the candidates are taken in.
    const auto later = [](const PreemptHead& a, const PreemptHead& b) {
      if (a.next.lease_price != b.next.lease_price) return a.next.lease_price > b.next.lease_price;
      return b.next.lease < a.next.lease;
    };
    std::make_heap(heads.begin(), heads.end(), later);
    Qty left = need;
    while (!heads.empty()) {
      std::pop_heap(heads.begin(), heads.end(), later);
      PreemptHead& h = heads.back();
      left -= found.emplace_back(h.next).take(left);
      if (left.value == 0) break;
      ++h.at;
      if (advance(h)) {
        std::push_heap(heads.begin(), heads.end(), later);
      } else {
        heads.pop_back();
      }
    }
    return found;
  }

  // The bid takes `q` GPUs of lease `lid` from the end of the notice on.
  void execute_preempt(LiveOrder& bid, LeaseId lid, Qty q, Seconds ws, Seconds we, Price price) {
    const bool bid_in = unhook(bid);
    LiveLease& old = leases.at(lid);
    LivePool& lp = pool_of(old);
    const Seconds ends_at = now + cfg.preempt_notice;
    bid.o.filled += q;
    bid.o.remaining -= q;
    Trade t;
    base_trade(t, lp, bid.o, q, ws, we, price, Side::buy);
    t.sell_order = old.sell_order;
    t.list_price = preemption_list_price(old);
    t.preemption = true;
    t.preempted_lease = old.id;
    // The preempted GPUs leave the pool's commitments from the end of the notice; the new lease takes them.
    lp.used.add(std::max(ends_at, old.start), old.end, -q.value);
    lp.used.add(ws, we, q.value);
    LiveLease fresh_copy = old;  // for the split-off rest
    LiveLease& fresh = new_lease(lp, t, nullptr);
    set_ask_terms(fresh, ask_window_start(old), ask_window_end(old), ask_min_duration(old), ask_min_chunk(old));
    set_ask_list_price(fresh, ask_list_price(old));
    t.lease = fresh.id;
    // The new lease is tied to the ask that sold the GPUs, like the one it replaces (cancel marks both).
    if (auto seller = orders.find(old.sell_order); seller != orders.end()) add_sold(*seller, fresh.id);
    set_fill_status(bid.o);
    emit(TradeEvent{t});
    emit_lease(fresh);
    LiveLease& pre = leases.at(lid);  // the same lease as `old` (slots are stable); re-fetched for clarity
    if (q < pre.quantity) {
      LiveLease rest = fresh_copy;
      rest.id = LeaseId(next_lease++);
      rest.quantity = Qty32(Qty(pre.quantity) - q);
      rest.amount = 0;
      const auto at = leases.emplace(rest.id, rest).first;
      LiveLease& r = *at;
      // The copy's flags name the fields `old` keeps apart: the rest's entry is a copy of old's. Its trade's
      // fields again, as its id is not old's (the trade's lag).
      if (pre.has & LiveLease::kRare) rare_leases.emplace(r.id, rare_leases.at(pre.id));
      r.has &= static_cast<std::uint8_t>(~LiveLease::kWide);  // set again below if the rest's fields do not fit
      const LeaseWide& pw = wide_for(pre);
      set_trade_fields(r, pre.buyer(pw), pre.trade(pw), pre.buy_order(pw), pre.list_price(pw),
                       pre.green_discount_bps(pw), pre.bucket(pw));
      set_split_from(r, pre.id);  // a preempted lease is never preempted again: `old` had no preempted_at
      set_owed(r, cost(r.price, r.quantity, r.end - r.start));
      add_to_pool(r, at.slot_number());
      schedule_lease(r);
      if (auto seller = orders.find(r.sell_order); seller != orders.end()) add_sold(*seller, r.id);
      pre.quantity = Qty32(q);
      emit_lease(r);
    }
    pre.status = LeaseStatus::preempted;
    set_preempted_at(pre, now);
    set_ends_at(pre, ends_at);
    const Seconds used = std::max(Seconds(0), std::min(ends_at, pre.end) - pre.start);
    set_owed(pre, cost(pre.price, pre.quantity, used));
    schedule_lease(pre);
    emit_lease(pre);
    emit(LeasePreempted{pre.id, buyer(pre), pre.quantity, now, ends_at, t.id});
    hook(bid, bid_in);
  }

  // ---------------------------------------------------------------- self-trade prevention

  // Applies the incoming order's STP mode; returns false when the incoming order must stop.
  bool self_trade(LiveOrder& incoming, LiveOrder& resting, bool at_placement) {
    // DESIGN.md defines the modes by role: "newest" is the incoming order, "oldest" the resting one.
    bool cancel_incoming = false;
    bool cancel_resting = false;
    switch (incoming.o.request.stp) {
      case StpMode::cancel_newest: cancel_incoming = true; break;
      case StpMode::cancel_oldest: cancel_resting = true; break;
      case StpMode::cancel_both: cancel_incoming = cancel_resting = true; break;
    }
    if (cancel_resting) finish_order(resting, OrderStatus::cancelled, Reason::self_trade, true);
    if (cancel_incoming) {
      stop_incoming_self_trade(incoming, at_placement);
      return false;
    }
    return true;
  }

  void stop_incoming_self_trade(LiveOrder& incoming, bool at_placement) {
    const bool no_fill = incoming.o.is_buy() ? incoming.o.filled.value == 0 : incoming.o.filled_gpu_seconds == 0;
    const OrderStatus st = at_placement && no_fill ? OrderStatus::rejected : OrderStatus::cancelled;
    finish_order(incoming, st, Reason::self_trade, false);
  }

  // ---------------------------------------------------------------- incoming bid

  bool bid_would_take(const RestOrder& bid) const {
    const Book& book = (*bid.book);
    const Seconds ws = bid_start(bid);
    const Seconds we = bid_end(bid);
    bool found = false;
    walk_asks(book, bid, bid.request.price, bid.request.constraints(), [&](const AskKey& k) {
      found = eligible_qty(bid, bid.remaining, k.lo->o, k.pool->p, ws, we, false).value > 0;
      return !found;
    });
    return found;
  }

  // Matches an incoming bid (out of the book). Emits trades; leaves the bid's own announcement to the caller.
  void match_bid(LiveOrder& bid, bool at_placement) {
    Book& book = (*bid.o.book);
    const BidConstraints& c = bid.o.request.constraints();
    const bool aon = bid.o.request.time_in_force == TimeInForce::fok || c.single_pool;
    const Seconds ws = bid_start(bid.o);
    const Seconds we = bid_end(bid.o);
    if (aon) {
      std::vector<PlannedFill> plan;
      bool own = false;
      if (!plan_bid(bid, ws, we, plan, own)) {
        if (own) {
          stop_incoming_self_trade(bid, at_placement);
        } else {
          finish_order(bid, OrderStatus::cancelled, Reason::none, false);
        }
        return;
      }
      for (const PlannedFill& f : plan) {
        if (f.lease) {
          execute_preempt(bid, f.lease, f.qty, f.start, f.end, f.price);
        } else {
          execute_fill(bid, orders.at(f.other), f.qty, f.start, f.end, f.price, Side::buy);
        }
      }
      return;
    }
    bool stopped = false;
    walk_asks(book, bid.o, bid.o.request.price, c, [&](const AskKey& k) {
      if (bid.o.remaining.value <= 0) return false;
      LiveOrder& ask = *k.lo;
      const Qty q = eligible_qty(bid.o, bid.o.remaining, ask.o, k.pool->p, ws, we, false);
      if (q.value == 0) return true;
      if (ask.o.account == bid.o.account) {
        stopped = !self_trade(bid, ask, at_placement);
        return !stopped;
      }
      execute_fill(bid, ask, q, ws, we, ask.o.ask_effective_price(), Side::buy);
      return true;
    }, bid.o.request.min_chunk.value == 1 ? bid.o.remaining.value : 0);
    if (stopped) return;
    // Only an interruptible bid preempts (preempt_candidates' first test, here: its call set up a frame for its
    // result and its heap for every bid that rested).
    if (bid.o.remaining.value > 0 && c.interruptible) {
      for (const PreemptCandidate& pc : preempt_candidates(bid.o, bid.o.remaining)) {
        if (bid.o.remaining.value == 0) break;
        const Qty q = pc.take(bid.o.remaining);
        if (q.value == 0) continue;
        execute_preempt(bid, pc.lease, q, pc.start, pc.end, pc.price);
      }
    }
  }

  // The all-or-none walk without changing anything. False if it cannot cover the bid (own = met own order).
  bool plan_bid(const LiveOrder& bid, Seconds ws, Seconds we, std::vector<PlannedFill>& plan, bool& own) const {
    const Book& book = (*bid.o.book);
    const Qty need = bid.o.remaining;
    const bool single = bid.o.request.constraints().single_pool;
    std::map<PoolId, std::pair<Qty, std::vector<PlannedFill>>> per_pool;
    Qty total;
    std::optional<bool> result;  // set when the walk decided
    walk_asks(book, bid.o, bid.o.request.price, bid.o.request.constraints(), [&](const AskKey& k) {
      const RestOrder& ask = k.lo->o;
      Qty cap = need - total;
      if (single) cap = need - per_pool[k.pool->p.id].first;
      const Qty q = eligible_qty(bid.o, cap, ask, k.pool->p, ws, we, false);
      if (q.value == 0) return true;
      if (ask.account == bid.o.account) {
        own = true;
        result = false;
        return false;
      }
      const PlannedFill f{ask.id, LeaseId(), q, ws, we, ask.ask_effective_price()};
      if (single) {
        auto& pp = per_pool[k.pool->p.id];
        pp.first += q;
        pp.second.push_back(f);
        if (pp.first == need) {
          plan = pp.second;
          result = true;
          return false;
        }
      } else {
        total += q;
        plan.push_back(f);
        if (total == need) {
          result = true;
          return false;
        }
      }
      return true;
    });
    if (result) return *result;
    if (single) return false;
    for (const PreemptCandidate& pc : preempt_candidates(bid.o, need - total)) {
      const Qty q = pc.take(need - total);
      if (q.value == 0) continue;
      plan.push_back(PlannedFill{OrderId(), pc.lease, q, pc.start, pc.end, pc.price});
      total += q;
      if (total == need) return true;
    }
    return false;
  }

  // ---------------------------------------------------------------- incoming ask

  bool ask_would_take(const RestOrder& ask) const {
    const Book& book = (*ask.book);
    const LivePool& lpool = *ask.ask->pool;
    const Pool& pool = lpool.p;
    if (ask.ask_effective_price() > bid_ceiling(book)) return false;
    BidList list(*this);
    BidWalk walk(ask.window_start, ask.window_end(), ask.ask_min_duration(), now, list.get());
    bids_for(book, lpool, ask.ask_effective_price(), spot_now(ask), walk);
    while (const auto k = walk.next()) {
      if (k->price < ask.ask_effective_price()) break;
      const RestOrder& bid = k->lo->o;
      if (eligible_qty(bid, bid.remaining, ask, pool, bid_start(bid), bid_end(bid), false).value > 0) return true;
    }
    return false;
  }

  // False when the ask has fewer GPUs than its lot (min_chunk) free throughout the window of the bid of key
  // `k`: eligible_qty then gives 0 whatever the bid (its lot is a multiple of the ask's). Judged from the key
  // and the ask's runs alone (`runs`: for_each_run's, taken again after each fill), before the bid's order is
  // read: a crossing ask's walk meets many bids whose windows its earlier fills used up (~24 for each fill in
  // the realistic bench). The window has a lot free throughout exactly when it lies inside one run (runs are
  // maximal), which is free.min(ws, we) >= the lot without the search of the ask's pieces for each bid. (The
  // walk itself passes over the fixed-window bids that fail it: BidWalk::serve.)
  static bool ask_serves(const Runs& runs, const BidKey& k, Seconds now) {
    const Seconds ws = k.start_at(now);
    const Seconds we = k.end_at(now);
    return we > ws && in_runs(runs, ws, we);
  }
  static void ask_runs(const RestOrder& ask, Runs& runs) {
    runs.clear();
    for_each_run(ask, [&](Seconds from, Seconds to) { runs.emplace_back(from, to); });
  }
  Runs serve_runs;  // match_ask's (not re-entered: fills match nothing)

  void match_ask(LiveOrder& ask, bool at_placement) {
    Book& book = (*ask.o.book);
    const LivePool& lpool = *ask.pool();
    const Pool& pool = lpool.p;
    const Seconds a_start = ask.o.window_start;
    const Seconds a_end = ask.o.window_end();
    const Seconds a_min = ask.o.ask_min_duration();
    if (ask.o.request.time_in_force == TimeInForce::fok) {
      // All-or-none: the walk must leave no sellable piece.
      RestOrder trial = ask.o;
      std::vector<PlannedFill> plan;
      bool complete = !ask_has_piece(trial);
      BidList list(*this);
      BidWalk walk(a_start, a_end, a_min, now, list.get());
      bids_for(book, lpool, ask.o.ask_effective_price(), spot_now(ask.o), walk);
      while (const auto k = walk.next()) {
        if (complete || k->price < ask.o.ask_effective_price()) break;
        const RestOrder& bid = k->lo->o;
        const Seconds ws = bid_start(bid);
        const Seconds we = bid_end(bid);
        const Qty q = eligible_qty(bid, bid.remaining, trial, pool, ws, we, false);
        if (q.value == 0) continue;
        if (bid.account == ask.o.account) {
          stop_incoming_self_trade(ask, at_placement);
          return;
        }
        trial.ask->free.add(ws, we, -q.value);
        plan.push_back(PlannedFill{bid.id, LeaseId(), q, ws, we, bid.request.price});
        complete = !ask_has_piece(trial);
      }
      if (!complete) {
        finish_order(ask, OrderStatus::cancelled, Reason::none, false);
        return;
      }
      for (const PlannedFill& f : plan) {
        execute_fill(orders.at(f.other), ask, f.qty, f.start, f.end, f.price, Side::sell);
      }
      return;
    }
    if (ask.o.ask_effective_price() > bid_ceiling(book)) return;  // no bid at its price: the walk would find none
    // Duration bids need GPUs free now; once the ask has none at this instant, none of them can use it.
    BidList list(*this);
    BidWalk walk(a_start, a_end, a_min, now, list.get());
    ask_runs(ask.o, serve_runs);
    walk.serve(&serve_runs);
    bids_for(book, lpool, ask.o.ask_effective_price(), spot_now(ask.o), walk);
    while (ask.o.is_open()) {
      const auto k = walk.next();
      if (!k || k->price < ask.o.ask_effective_price()) break;
      if (!ask_serves(serve_runs, *k, now)) continue;
      LiveOrder& bid = *k->lo;
      const Seconds ws = bid_start(bid.o);
      const Seconds we = bid_end(bid.o);
      const Qty q = eligible_qty(bid.o, bid.o.remaining, ask.o, pool, ws, we, false);
      if (q.value == 0) continue;
      if (bid.o.account == ask.o.account) {
        if (!self_trade(ask, bid, at_placement)) return;
        continue;
      }
      execute_fill(bid, ask, q, ws, we, bid.o.request.price, Side::sell);
      ask_runs(ask.o, serve_runs);
      walk.serve(&serve_runs);
      if (!spot_now(ask.o)) walk.drop_duration();  // nothing free now: no duration bid can use it
    }
  }

  // Matches resting asks that time, a re-pricing or a resume may have brought together with bids.
  void match_woken(std::vector<OrderId> ids) {
    std::vector<AskKey> keys;
    for (OrderId id : ids) {
      auto it = orders.find(id);
      if (it == orders.end() || !it->o.is_open() || !it->o.is_sell()) continue;
      const RestOrder& o = it->o;
      keys.push_back(AskKey{o.ask_effective_price(), o.priority(), o.id});
    }
    std::sort(keys.begin(), keys.end());
    keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
    for (const AskKey& k : keys) {
      auto it = orders.find(k.id);
      if (it == orders.end()) continue;
      LiveOrder& ask = *it;
      if (!ask.o.is_open() || (*ask.o.book).halted) continue;
      if (!ask_would_take(ask.o)) continue;
      if (ask.o.request.post_only) {
        finish_order(ask, OrderStatus::cancelled, Reason::would_take, true);
        continue;
      }
      const OrderStatus before = ask.o.status;
      const std::int64_t filled_before = ask.o.filled_gpu_seconds;
      const bool in = unhook(ask);
      hook(ask, false);  // out of the book while it is the incoming order
      match_ask(ask, false);
      if (ask.o.is_open()) {
        unhook(ask);
        hook(ask, in);
      }
      if (ask.o.status != before || ask.o.filled_gpu_seconds != filled_before || !ask.o.is_open()) {
        announce_state(ask);
      }
    }
  }

  // fn(lo) for each of lp's asks in its book, in no order: its open asks that are in_book (all of them between
  // commands; an incoming ask is not yet, a kept one still is). For the paths that need a pool's resting asks all
  // at once: the first fixed-window bid's index build, a window outside the index, a market's resume.
  template <class F>
  void for_each_resting_ask(const LivePool& lp, F&& fn) const {
    for (OrderSlot n : lp.asks.items) {
      LiveOrder& lo = orders.at_slot(n);
      if (lo.in_book) fn(lo);
    }
  }

  // Re-prices a pool's open asks after its discount changed; returns them.
  std::vector<OrderId> reprice(LivePool& lp) {
    std::vector<OrderId> changed;
    const Price tk = tick(lp.p.spec.market);
    for (OrderId id : lp.asks.ids(orders)) {
      LiveOrder& lo = orders.at(id);
      const Price eff = discounted(lo.o.request.price, lp.p.green_discount_bps, tk);
      if (eff == lo.o.ask_effective_price() && lo.o.green_discount_bps() == lp.p.green_discount_bps) continue;
      const bool in = unhook(lo);
      if (eff != lo.o.ask_effective_price()) hide_view(lo);
      lo.o.ask->effective = eff;
      lo.o.ask->green_discount_bps = lp.p.green_discount_bps;
      lo.o.set_updated_at(now);
      hook(lo, in);
      emit_order<OrderUpdated>(lo.o);
      changed.push_back(id);
    }
    return changed;
  }

  // ---------------------------------------------------------------- the time step

  // The clock moved to `t`; what came due, in run_due(). Apart (out of line): inlined or called whole, its sets
  // and loop made every command set up and tear down its frame for the rare command that has timers due.
  void advance(Seconds t) {
    if (t > now) now = t;
    if (!timers.due(now)) return;  // nothing due (most commands)
    run_due();
  }

  [[gnu::noinline]] void run_due() {
    std::set<OrderId> due_orders;
    std::set<LeaseId> due_leases;
    std::set<PoolId> due_pools;
    while (timers.due(now)) {
      const Timer tm = timers.pop();
      switch (tm.kind()) {
        case TimerKind::order: {
          auto it = orders.find(OrderId(tm.id()));
          if (it != orders.end() && take_timer(*it, tm.at)) due_orders.insert(OrderId(tm.id()));
          break;
        }
        case TimerKind::lease:
          if (leases.count(LeaseId(tm.id()))) due_leases.insert(LeaseId(tm.id()));
          break;
        case TimerKind::pool:
          if (pools.count(PoolId(tm.id()))) due_pools.insert(PoolId(tm.id()));
          break;
      }
    }
    // a. Expiries.
    for (OrderId id : due_orders) {
      LiveOrder& lo = orders.at(id);
      if (!lo.o.is_open()) continue;
      const RestRequest& r = lo.o.request;
      bool expire = r.time_in_force == TimeInForce::gtd && r.expire_at() && *r.expire_at() <= now;
      if (lo.o.is_buy() && !lo.o.is_duration_bid() && lo.o.window_start < now) expire = true;
      if (lo.o.is_sell() && lo.o.window_end() <= now) expire = true;
      if (expire) finish_order(lo, OrderStatus::expired, Reason::expired, true);
    }
    // b. Leases.
    for (LeaseId id : due_leases) {
      LiveLease& l = leases.at(id);
      bool changed = false;
      if (l.status == LeaseStatus::reserved && l.start <= now) {
        l.status = LeaseStatus::active;
        changed = true;
      }
      if (l.status == LeaseStatus::active && l.end <= now) {
        l.status = LeaseStatus::completed;
        end_lease(l);
        changed = true;
      }
      if (l.status == LeaseStatus::preempted && ends_at(l) <= now) {
        end_lease(l);
        changed = true;
      }
      if (changed) emit_lease(l);
      if (l.ended) {
        erase_lease(id, l);
      } else {
        schedule_lease(l);
      }
    }
    // c. Verification expiries.
    std::vector<OrderId> woken;
    for (PoolId id : due_pools) {
      LivePool& lp = pools.at(id);
      if (!lp.p.verified || lp.p.verified_until > now) continue;
      if (!classify(lp)) continue;
      lp.p.updated_at = now;
      emit(PoolChanged{lp.p});
      for (OrderId o : reprice(lp)) woken.push_back(o);
    }
    // d. Views, timers and time-driven matching.
    for (OrderId id : due_orders) {
      LiveOrder& lo = orders.at(id);
      if (!lo.o.is_open()) continue;
      const bool in = unhook(lo);
      hook(lo, in);
      if (lo.o.is_sell()) woken.push_back(id);
    }
    match_woken(std::move(woken));
  }

  // ---------------------------------------------------------------- commands

  void reject_command(Reason r, std::int64_t subject) { emit(CommandRejected{seq, r, subject}); }

  // Checks a placement `r` and fills `o`'s geometry and `market` (the interned market, once known).
  // What validate() works out of a placement before it can fail: the window as the order will hold it and
  // a bid's remaining quantity (duration bids and sells keep 0 / no remaining, as an Order's defaults).
  struct Geometry {
    Seconds window_start;
    Seconds window_end;
    Qty remaining;
    LivePool* pool{nullptr};  // sell: its pool
  };

  // The book of the market a bid named last (books are never erased): most placements name the same one.
  Book* last_book{nullptr};

  // `market`: the order's book, once known (also when the order is then refused).
  Reason validate(const OrderRequest& r, Geometry& o, const Command& cmd, Book*& market, const Account& a) {
    if (r.price.value <= 0 || r.quantity.value <= 0 || r.min_chunk.value <= 0) return Reason::invalid_field;
    if (r.price.value > 1'000'000'000'000 || r.quantity.value > kMaxQuantity) return Reason::invalid_field;
    if (r.min_duration.value < 0) return Reason::invalid_field;
    if (r.time_in_force == TimeInForce::gtd && !r.expire_at) return Reason::invalid_field;
    if (r.post_only && (r.time_in_force == TimeInForce::ioc || r.time_in_force == TimeInForce::fok)) {
      return Reason::invalid_field;
    }
    if (r.side == Side::buy) {
      const bool fixed = r.start && r.end;
      if (fixed == r.duration.has_value() || (!fixed && (r.start || r.end))) return Reason::invalid_field;
      if (r.duration && r.duration->value <= 0) return Reason::invalid_field;
      if (fixed && *r.end <= *r.start) return Reason::invalid_field;
      if (r.constraints.single_pool && r.time_in_force != TimeInForce::ioc &&
          r.time_in_force != TimeInForce::fok) {
        return Reason::invalid_field;
      }
      if (last_book && *last_book->key == r.market) {
        market = last_book;
      } else {
        auto b = books.find(r.market);
        if (b == books.end()) return Reason::not_found;
        market = last_book = &b->second;
      }
    } else {
      if (!r.start || !r.end || r.duration) return Reason::invalid_field;
      if (*r.end <= *r.start) return Reason::invalid_field;
      LivePool* p = own_pool(cmd, r.pool);
      if (!p) return Reason::not_found;
      LivePool& lp = *p;
      if (!lp.book) lp.book = book_of(lp.p.spec.market);
      market = lp.book;
      o.pool = &lp;
    }
    const Book& book = *market;
    if (book.halted) return Reason::market_halted;
    if (r.price.value % book.spec.tick.value != 0) return Reason::off_tick;
    if (r.quantity.value % r.min_chunk.value != 0) return Reason::quantity_not_multiple_of_chunk;
    if (r.side == Side::buy && r.start && *r.start < now) return Reason::window_in_past;
    if (r.side == Side::sell && *r.end <= now) return Reason::window_in_past;
    // Geometry, needed by the exposure and capacity checks.
    if (r.side == Side::buy) {
      if (r.start) {
        o.window_start = *r.start;
        o.window_end = *r.end;
      }
      o.remaining = r.quantity;
    } else {
      o.window_start = std::max(*r.start, now);
      o.window_end = *r.end;
    }
    if (a.open_orders + 1 > a.limits.max_open_orders) return Reason::exposure_limit;
    if (r.side == Side::buy) {
      if (a.open_gpus + r.quantity.value > a.limits.max_open_gpus.value) return Reason::exposure_limit;
      const Seconds secs = r.duration ? *r.duration : o.window_end - o.window_start;
      const Int128 n = a.notional_x3600 + cost_x3600(r.price, r.quantity, secs);
      if (n > static_cast<Int128>(a.limits.max_open_notional) * 3600) return Reason::exposure_limit;
    } else {
      const LivePool& lp = *o.pool;
      // The pool's peak anywhere bounds its peak over the window: the exact query only near capacity.
      if (lp.used.max_all() + r.quantity.value > lp.p.gpus().value &&
          lp.used.max(o.window_start, o.window_end) + r.quantity.value > lp.p.gpus().value) {
        return Reason::insufficient_pool_capacity;
      }
    }
    return Reason::none;
  }

  // The fields a placed order gets from its command, accepted (a RestOrder in its slot) or rejected (an Order).
  template <class O>
  void stamp_placed(O& o, const Command& cmd, const OrderRequest& r, std::uint64_t h) const {
    o.id = OrderId(cmd.seq);
    o.account = cmd.account;
    o.created_at = now;
    if constexpr (std::is_same_v<O, Order>) {
      o.priority = cmd.seq;
      o.updated_at = now;
      o.effective_price = r.price;  // a RestOrder's: its limit (a bid) or its AskSide's (on(PlaceOrder))
      o.body_hash = h;              // a RestOrder's: request_into()
    } else {
      o.priority_lag = 0;   // cmd.seq, as the id
      o.updated_after = 0;  // now, as created_at
    }
  }

  // A placement whose client_order_id the account used before: a duplicate or a conflict (true), else false.
  [[gnu::noinline]] bool place_repeat(const Command& cmd, const OrderRequest& r, std::uint64_t h) {
    const CidKey k{cmd.account, r.client_order_id};
    if (auto it = open_cids.find(k); it != open_cids.end()) {
      const LiveOrder& lo = orders.at(it->second);
      if (lo.o.body_hash() == h) {
        RestOrder current = lo.o;
        refresh_ask_accounting(current);
        emit(OrderDuplicate{to_order(current)});
      } else {
        reject_command(Reason::idempotency_conflict, lo.o.id.value);
      }
      return true;
    }
    if (auto it = finished_cids.find(k); it != finished_cids.end()) {
      if (it->second.body_hash == h) {
        emit(OrderDuplicate{it->second.order});
      } else {
        reject_command(Reason::idempotency_conflict, it->second.order.id.value);
      }
      return true;
    }
    return false;
  }

  // A placement validate() refused with `bad` (`market`: its book, if known).
  [[gnu::noinline]] void place_rejected(const Command& cmd, const OrderRequest& r, std::uint64_t h, const Book* market,
                                        Reason bad) {
    Order o;
    stamp_placed(o, cmd, r, h);
    o.request = r;
    if (market) o.market = *market->key;
    o.status = OrderStatus::rejected;
    o.reason = bad;
    o.remaining = o.is_buy() ? r.quantity : Qty(0);  // filled + remaining = quantity, always
    o.window_start = Seconds(0);
    o.window_end = Seconds(0);
    emit(OrderRejected{o});
    if (!r.client_order_id.empty()) finished_cids[CidKey{cmd.account, r.client_order_id}] = Finished{o, h, seq};
  }

  // The repeat and the refusal out of line (place_repeat, place_rejected): their Order, RestOrder and map code
  // made every placement's frame and register saves larger.
  void on(const Command& cmd, const PlaceOrder& c) {
    const OrderRequest& r = c.order;
    // Only a client_order_id's repeats compare the hash; without one it stays 0 (see Order::body_hash).
    const std::uint64_t h = r.client_order_id.empty() ? 0 : body_hash(r);
    if (!r.client_order_id.empty() && place_repeat(cmd, r, h)) return;
    // No staging Order: validate() works out the geometry, and an accepted order is built in its slot.
    Geometry g;
    Book* market = nullptr;
    Account& acct = account(cmd.account);
    const Reason bad = validate(r, g, cmd, market, acct);
    if (bad != Reason::none) return place_rejected(cmd, r, h, market, bad);
    const auto at = orders.emplace_new(OrderId(cmd.seq));
    LiveOrder& lo = *at;
    RestOrder& o = lo.o;
    request_into(o, r, market, h, g.window_start, g.window_end);
    stamp_placed(o, cmd, r, h);
    o.set_window(g.window_start, g.window_end);
    o.remaining = g.remaining;
    if (r.side == Side::sell) {
      LivePool& lp = *g.pool;
      const std::int64_t total = r.quantity.value * (g.window_end - g.window_start).value;
      o.ask = new_ask_side(g.window_start, g.window_end, r.quantity, total);
      // No discount: the list price itself (validate() checked that it is on the tick).
      o.ask->effective = lp.p.green_discount_bps == 0 ? r.price
                                                      : discounted(r.price, lp.p.green_discount_bps, market->spec.tick);
      o.ask->min_duration = r.min_duration;
      o.ask->pool = &lp;
      o.ask->green_discount_bps = lp.p.green_discount_bps;
      o.filled_gpu_seconds = 0;  // the sell's members of the shared storage (see RestOrder)
      // Its accounting as refresh_ask_accounting() finds it: its window starts at or after now (validate
      // clips it), so nothing has lapsed and all of it is free.
      o.free_gpu_seconds = total;
      lp.used.add(g.window_start, g.window_end, r.quantity.value);
      lp.used.trim_before(now);
      lp.asks.add<pool_slot>(lo, at.slot_number());
    } else if (r.min_duration.value != 0) {  // a bid's (ignored, and echoed) needs a record
      o.ask = Owned(std::make_unique<AskSide>());
      o.ask->effective = r.price;
      o.ask->min_duration = r.min_duration;
    }
    acct.orders.add<account_slot>(lo, at.slot_number());
    if (!r.client_order_id.empty()) open_cids[CidKey{cmd.account, r.client_order_id}] = o.id;
    // What hook(lo, false) does for an order not yet in a book and not yet shown: its account sums and its
    // bucket. Its timer waits for the hook that puts it in the book (or none: it ends while incoming).
    account_add(lo, +1, &acct);
    lo.counted = true;
    o.bucket = order_bucket(o);
    emit_order<OrderAccepted>(o);
    if (r.time_in_force == TimeInForce::gtd && *r.expire_at <= now) {
      finish_order(lo, OrderStatus::expired, Reason::expired, true);
      return;
    }
    // Only a post_only order needs the dry run (the walk is the costly part of a placement).
    if (r.post_only && (o.is_buy() ? bid_would_take(o) : ask_would_take(o))) {
      finish_order(lo, OrderStatus::rejected, Reason::would_take, true);
      return;
    }
    if (o.is_buy()) {
      match_bid(lo, true);
    } else {
      match_ask(lo, true);
    }
    const bool immediate = r.time_in_force == TimeInForce::ioc || r.time_in_force == TimeInForce::fok;
    if (o.is_open() && immediate) finish_order(lo, OrderStatus::cancelled, Reason::none, false);
    const bool filled_some = o.is_buy() ? o.filled.value > 0 : o.filled_gpu_seconds > 0;
    if (o.is_open()) {
      // Out of the book while incoming; its account sums are current, or out after a fill (execute_fill):
      // hook() puts them back and it enters the book.
      if (lo.in_book) unhook(lo);
      hook(lo, true);
      if (filled_some) emit_order<OrderUpdated>(o);
    } else {
      emit_order<OrderDone>(o);
    }
  }

  LiveOrder* own_open_order(const Command& cmd, OrderId id) {
    auto it = orders.find(id);
    if (it == orders.end() || !it->o.is_open() || it->o.account != cmd.account) return nullptr;
    return &*it;
  }

  void on(const Command& cmd, const Cancel& c) {
    LiveOrder* lo = own_open_order(cmd, c.order);
    if (!lo) return reject_command(Reason::not_found, c.order.value);
    finish_order(*lo, OrderStatus::cancelled, Reason::none, true);
  }

  void on(const Command& cmd, const CancelAll& c) {
    auto ait = accounts.find(cmd.account);
    if (ait == accounts.end()) return;
    const std::vector<OrderId> ids = ait->second.orders.ids(orders);
    for (OrderId id : ids) {
      LiveOrder& lo = orders.at(id);
      if (c.market && *lo.o.market() != *c.market) continue;
      finish_order(lo, OrderStatus::cancelled, Reason::none, true);
    }
  }

  void on(const Command& cmd, const Amend& c) {
    LiveOrder* p = own_open_order(cmd, c.order);
    if (!p) return reject_command(Reason::not_found, c.order.value);
    LiveOrder& lo = *p;
    RestOrder& o = lo.o;
    const Book& book = (*o.book);
    if (book.halted) return reject_command(Reason::market_halted, o.id.value);
    const Qty q = c.quantity.value_or(o.request.quantity);
    const Price price = c.price.value_or(o.request.price);
    if (q > o.request.quantity || q.value <= 0) return reject_command(Reason::invalid_amend, o.id.value);
    if (q.value % o.request.min_chunk.value != 0) {
      return reject_command(Reason::quantity_not_multiple_of_chunk, o.id.value);
    }
    if (price.value <= 0) return reject_command(Reason::invalid_field, o.id.value);
    if (price.value % book.spec.tick.value != 0) return reject_command(Reason::off_tick, o.id.value);
    const Qty cut = Qty(o.request.quantity) - q;
    const Seconds from = std::max(now, o.window_start);
    if (o.is_buy()) {
      if (q <= o.filled) return reject_command(Reason::invalid_amend, o.id.value);
      const Account& a = account(o.account);
      const Qty rem = o.remaining - cut;
      const Int128 n = a.notional_x3600 - cost_x3600(o.request.price, o.remaining, bid_seconds(o)) +
                       cost_x3600(price, rem, bid_seconds(o));
      // Refused only when the amend raises the open notional past the limit: one that lowers it (a cut with a
      // higher price) is never refused, even while the account is over a limit lowered since.
      if (n > a.notional_x3600 && n > static_cast<Int128>(a.limits.max_open_notional) * 3600) {
        return reject_command(Reason::exposure_limit, o.id.value);
      }
    } else if (cut.value > 0) {
      if (o.ask->free.min(from, o.window_end()) < cut.value) return reject_command(Reason::invalid_amend, o.id.value);
      RestOrder trial = o;  // the cut must leave something to sell: nothing left is a cancel, as for bids
      trial.ask->free.add(from, o.window_end(), -cut.value);
      if (!ask_has_piece(trial)) return reject_command(Reason::invalid_amend, o.id.value);
    }
    const bool new_price = price != o.request.price;
    if (new_price && o.request.post_only) {
      RestOrder trial = o;
      trial.request.price = price;
      trial.request.quantity = Qty32(q);
      if (trial.is_buy()) {
        trial.remaining = o.remaining - cut;
      } else {
        trial.ask->effective = discounted(price, o.green_discount_bps(), book.spec.tick);
        trial.ask->free.add(from, o.window_end(), -cut.value);
      }
      if (trial.is_buy() ? bid_would_take(trial) : ask_would_take(trial)) {
        return reject_command(Reason::would_take, o.id.value);
      }
    }
    const bool in = unhook(lo);
    o.request.quantity = Qty32(q);
    if (o.is_buy()) {
      o.remaining -= cut;
    } else if (cut.value > 0) {
      LivePool& lp = *lo.pool();
      o.ask->free.add(from, o.window_end(), -cut.value);
      lp.used.add(from, o.window_end(), -cut.value);
      o.ask->cancelled_gpu_seconds += cut.value * std::max<std::int64_t>(0, (o.window_end() - from).value);
    }
    if (new_price) {
      const Price eff = o.is_sell() ? discounted(price, o.green_discount_bps(), book.spec.tick) : price;
      if (o.is_buy() || eff != o.effective_price()) hide_view(lo);  // a bid is shown at its limit
      o.request.price = price;
      o.set_priority(cmd.seq);
      if (o.ask) o.ask->effective = eff;  // a bid without a record: its limit, set above
    }
    o.set_updated_at(now);
    if (!new_price) {
      hook(lo, in);
      announce_state(lo);
      return;
    }
    hook(lo, false);
    emit_order<OrderUpdated>(o);
    const std::int64_t before = o.is_buy() ? o.filled.value : o.filled_gpu_seconds;
    if (o.is_buy()) {
      match_bid(lo, false);
    } else {
      match_ask(lo, false);
    }
    const std::int64_t after = o.is_buy() ? o.filled.value : o.filled_gpu_seconds;
    if (o.is_open()) {
      unhook(lo);
      hook(lo, true);
      if (after != before) emit_order<OrderUpdated>(o);
    } else {
      emit_order<OrderDone>(o);
    }
  }

  void on(const Command& cmd, const AddPool& c) {
    const PoolSpec& s = c.spec;
    auto book = books.find(s.market);
    if (book == books.end()) return reject_command(Reason::not_found, cmd.seq);
    if (s.gpus_per_node <= 0 || s.nodes < 0 || s.region.empty() || std::int64_t{s.gpus_per_node} * s.nodes > kMaxPoolGpus) {
      return reject_command(Reason::invalid_field, cmd.seq);
    }
    LivePool& lp = add_pool(PoolId(cmd.seq));
    lp.p.provider = cmd.account;
    lp.p.spec = s;
    lp.p.created_at = now;
    lp.p.updated_at = now;
    lp.region = region_number(s.region);
    classify(lp);
    if (s.tier == Tier::spot) book->second.spot_pools.emplace(lp.p.id, &lp);
    emit(PoolChanged{lp.p});
  }

  // Pool `id` if the command's account provides it and it is not retired: else, to that account, it is not found.
  LivePool* own_pool(const Command& cmd, PoolId id) {
    LivePool* lp = find_pool(id);
    return lp && lp->p.provider == cmd.account && !lp->p.retired ? lp : nullptr;
  }

  void on(const Command& cmd, const ResizePool& c) {
    LivePool* lp = own_pool(cmd, c.pool);
    if (!lp) return reject_command(Reason::not_found, c.pool.value);
    const std::int64_t gpus = std::int64_t{lp->p.spec.gpus_per_node} * c.nodes;
    if (c.nodes < 0 || gpus > kMaxPoolGpus) return reject_command(Reason::invalid_field, c.pool.value);
    if (lp->used.max(now, kForever) > gpus) return reject_command(Reason::pool_busy, c.pool.value);
    lp->p.spec.nodes = c.nodes;
    lp->p.updated_at = now;
    emit(PoolChanged{lp->p});
  }

  void on(const Command& cmd, const RetirePool& c) {
    LivePool* lp = own_pool(cmd, c.pool);
    if (!lp) return reject_command(Reason::not_found, c.pool.value);
    if (!lp->asks.empty() || !lp->leases.empty()) return reject_command(Reason::pool_busy, c.pool.value);
    lp->p.retired = true;
    lp->p.updated_at = now;
    books.at(lp->p.spec.market).spot_pools.erase(lp->p.id);
    emit(PoolChanged{lp->p});
  }

  void on(const Command&, const VerifyPool& c) {
    LivePool* found = find_pool(c.pool);
    if (!found) return reject_command(Reason::not_found, c.pool.value);
    LivePool& lp = *found;
    lp.p.verified = c.verified;
    if (c.verified) {  // a withdrawal keeps the last expiry and evidence for the record
      lp.p.verified_until = c.expires_at;
      lp.p.evidence = c.evidence;
    }
    lp.p.updated_at = now;
    classify(lp);
    schedule_pool(lp);
    emit(PoolChanged{lp.p});
    reprice(lp);
    // Verified values can make energy-constrained bids eligible even when the price stays.
    match_woken(lp.asks.ids(orders));
  }

  void on(const Command& cmd, const ReleaseLease& c) {
    auto it = leases.find(c.lease);
    if (it == leases.end() || buyer(*it) != cmd.account) return reject_command(Reason::not_found, c.lease.value);
    LiveLease& l = *it;
    if (l.status != LeaseStatus::reserved && l.status != LeaseStatus::active) {
      return reject_command(Reason::lease_not_open, c.lease.value);
    }
    LivePool& lp = pool_of(l);
    const Seconds from = std::min(std::max(now, l.start), l.end);
    lp.used.add(from, l.end, -l.quantity.value);
    const Seconds window = l.end - l.start;
    Seconds billed = window;
    if (l.interruptible) {
      const Seconds used = std::min(std::max(now - l.start, Seconds(0)), window);
      billed = std::max(used, std::min(cfg.min_bill, window));
    }
    l.status = LeaseStatus::released;
    set_ends_at(l, from);
    set_owed(l, cost(l.price, l.quantity, billed));
    end_lease(l);
    emit_lease(l);
    erase_lease(it->id, l);
  }

  void on(const Command&, const HaltMarket& c) {
    auto it = books.find(c.market);
    if (it == books.end()) return reject_command(Reason::not_found, 0);
    it->second.halted = c.halted;
    emit(MarketHaltChanged{c.market, c.halted});
    if (!c.halted) {
      std::vector<OrderId> ids;
      for (const AskPool& ap : it->second.ask_pools) {
        for_each_resting_ask(*ap.lp, [&](const LiveOrder& lo) { ids.push_back(lo.o.id); });
      }
      match_woken(std::move(ids));  // sorts them into ask priority
    }
  }

  void on(const Command&, const SetLimits& c) {
    Account& a = account(c.account);
    a.limits = c.limits;
    a.custom = true;
    emit(LimitsChanged{c.account, c.limits});
  }

  void on(const Command&, const SetGreenPolicy& c) {
    policy = c.policy;
    emit(GreenPolicyChanged{policy});
    std::vector<OrderId> woken;
    for (auto& [id, lp] : pools) {
      if (!classify(lp)) continue;
      lp.p.updated_at = now;
      emit(PoolChanged{lp.p});
      reprice(lp);
      for (OrderId ask : lp.asks.ids(orders)) woken.push_back(ask);  // green_only eligibility may change too
    }
    match_woken(std::move(woken));
  }

  void on(const Command&, const Tick&) {}

  // Out of line: the deques' clear() inlined into apply() cost every command ~12 instructions (callgrind, plain).
  [[gnu::noinline]] void drop_query_answers() {
    query_orders.clear();
    query_leases.clear();
    query_answers = false;
  }

  void apply(const Command& cmd, EventSink& sink) {
    sink_ = &sink;
    // The queries' answers live until the next apply(), an empty tick's included (it does not move last_seq).
    if (query_answers) [[unlikely]] drop_query_answers();
    seq = cmd.seq;
    advance(cmd.now);
    std::visit([&](const auto& body) { on(cmd, body); }, cmd.body);
    flush_views();
    for (LiveOrder* lo : dead) {
      if (lo->o.ask && spare_asks.size() < kSpareAsks) spare_asks.push_back(std::move(lo->o.ask));
      orders.erase(lo->o.id);
    }
    dead.clear();
    last_seq = std::max(last_seq, cmd.seq);
    sink_ = nullptr;
  }

  // ---------------------------------------------------------------- quote

  std::vector<QuoteFill> quote(const OrderRequest& r, AccountId account_id) const {
    std::vector<QuoteFill> out;
    auto book = books.find(r.market);
    if (r.side != Side::buy || book == books.end() || r.quantity.value <= 0 || r.min_chunk.value <= 0) return out;
    // A quantity a placement refuses (validate) gets no fills: over the largest, or not in whole lots.
    if (r.quantity.value > kMaxQuantity || r.quantity.value % r.min_chunk.value != 0) return out;
    // What a placement would end before any fill: a halted market, a gtd already expired, a post_only bid
    // (it rests without fills or is rejected as would_take).
    if (book->second.halted || r.post_only) return out;
    if (r.time_in_force == TimeInForce::gtd && r.expire_at && *r.expire_at <= now) return out;
    if (r.start.has_value() == r.duration.has_value()) return out;
    Order full;
    full.id = OrderId(std::numeric_limits<std::int64_t>::max());
    full.priority = full.id.value;  // never read in a quote; kept compact (a priority before the id goes to RestCold)
    full.account = account_id;
    full.request = r;
    full.market = r.market;
    full.remaining = r.quantity;
    if (r.start) {
      if (!r.end || *r.end <= *r.start || *r.start < now) return out;
      full.window_start = *r.start;
      full.window_end = *r.end;
    }
    const RestOrder bid = rest_of(std::move(full));
    const Seconds ws = bid_start(bid);
    const Seconds we = bid_end(bid);
    const bool aon = r.time_in_force == TimeInForce::fok || r.constraints.single_pool;
    std::map<PoolId, std::pair<Qty, std::vector<QuoteFill>>> per_pool;
    Qty total;
    std::optional<std::vector<QuoteFill>> single_fills;  // set when one pool covered the quantity
    walk_asks(book->second, bid, r.price, r.constraints, [&](const AskKey& k) {
      if (total == r.quantity) return false;
      const RestOrder& ask = k.lo->o;
      const PoolId pool = ask.request_pool();
      const Qty cap = r.constraints.single_pool ? r.quantity - per_pool[pool].first : r.quantity - total;
      const Qty q = eligible_qty(bid, cap, ask, k.pool->p, ws, we, false);
      if (q.value == 0) return true;
      const QuoteFill fill{pool, ask.id, q, ws, we, ask.ask_effective_price(), ask.request.price, ask.green_discount_bps(),
                           false};
      if (r.constraints.single_pool) {
        auto& pp = per_pool[pool];
        pp.first += q;
        pp.second.push_back(fill);
        if (pp.first == r.quantity) {
          single_fills = pp.second;
          return false;
        }
      } else {
        total += q;
        out.push_back(fill);
      }
      return true;
    });
    if (single_fills) return std::move(*single_fills);
    if (r.constraints.single_pool) return {};
    for (const PreemptCandidate& pc : preempt_candidates(bid, r.quantity - total)) {
      if (total == r.quantity) break;
      const Qty q = pc.take(r.quantity - total);
      if (q.value == 0) continue;
      const LiveLease& l = leases.at(pc.lease);
      const Pool& p = pool_of(l).p;
      out.push_back(QuoteFill{p.id, l.sell_order, q, pc.start, pc.end, pc.price, preemption_list_price(l),
                              p.green_discount_bps, true});
      total += q;
    }
    if (aon && total != r.quantity) return {};
    return out;
  }

  // ---------------------------------------------------------------- self-check (tests)

  std::string check_invariants() const {
    std::string err;
    auto fail = [&](const std::string& what) {
      if (err.size() < 2000) err += what + "\n";
    };
    std::map<PoolId, Steps> held;
    std::map<const Book*, std::size_t> fixed_entries;  // entries the fixed bid indexes should hold, by book
    std::size_t open = 0;
    std::size_t open_sells = 0;
    for (auto at = orders.begin(); at != orders.end(); ++at) {
      const LiveOrder& lo = *at;
      const RestOrder& o = lo.o;
      if (lo.kept) fail("order " + std::to_string(lo.o.id.value) + " still kept in its book sets after the command");
      if (!o.is_open()) continue;
      ++open;
      open_sells += o.is_sell();
      if (o.bucket != order_bucket(o)) fail("bucket of order " + std::to_string(o.id.value) + " stale");
      if (o.is_buy()) {
        if (o.filled + o.remaining != o.request.quantity) fail("bid filled+remaining: " + to_string(to_order(o)));
      } else {
        RestOrder c = o;
        refresh_ask_accounting(c);
        if (c.filled_gpu_seconds + c.ask->lapsed_gpu_seconds + c.free_gpu_seconds + c.ask->cancelled_gpu_seconds !=
            c.ask->total_gpu_seconds) {
          fail("ask accounting: " + to_string(to_order(c)));
        }
        for (const Step& p : o.ask->free.pieces()) {
          if (p.gpus < 0) fail("negative free: " + to_string(to_order(o)));
          held[o.request_pool()].add(std::max(p.from, now), std::max(p.to, now), p.gpus);
        }
      }
      const Book& b = (*o.book);
      bool in = lo.in_book;
      if (in && o.is_buy()) {
        const BidKey bk{o.request.price, o.priority(), o.id};
        const BidGroup& g = b.bid_groups.at(static_cast<std::size_t>(lo.bid_group));
        BidConstraints rep = o.request.constraints();
        rep.regions.clear();
        if (!(g.rep == rep)) fail("bid in the wrong constraint group: " + to_string(to_order(o)));
        const std::vector<std::string>& regions = o.request.constraints().regions;
        // Where the bid rests: `any` without regions, else each of its regions' entry in `by_region` (a
        // missing one: not in the book).
        const auto homes = [&](const BidSets& any, const std::vector<std::unique_ptr<BidSets>>& by_region) {
          std::vector<const BidSets*> out;
          if (regions.empty()) out.push_back(&any);
          for (const std::string& r : regions) {
            auto it = region_numbers.find(r);
            if (it == region_numbers.end() || it->second >= by_region.size() || !by_region[it->second]) {
              in = false;
            } else {
              out.push_back(by_region[it->second].get());
            }
          }
          return out;
        };
        if (o.is_duration_bid()) {
          for (const BidSets* h : homes(g.any, g.by_region)) in = in && h->duration.count(bk) == 1;
        } else {
          // In the fixed bid index of each of its regions (or the one without), in the cell of its window.
          const BidEntry e = bid_entry(lo);
          for (const BidSets* h : homes(g.any, g.by_region)) {
            const BidIndex* ix = &h->fixed;
            bool found = false;
            if (const BidCell* cell = ix->find(run_slot(e.start), run_slot(e.end)).second) {
              auto it = cell->bids.lower_bound(e);
              found = it != cell->bids.end() && *it == e;
            }
            if (!found) fail("fixed bid " + std::to_string(o.id.value) + " not indexed");
            ++fixed_entries[&b];
          }
        }
      }
      const AskKey ak{o.effective_price(), o.priority(), o.id};
      if (in && o.is_sell()) {
        in = lo.pool() == &pools.at(o.request_pool()) && lo.pool()->book_count > 0;
        if (in) {  // in its pool's list of open asks, at its slot
          const OrderSlots& pool_asks = lo.pool()->asks.items;
          in = o.ask->pool_slot < pool_asks.size() && pool_asks[o.ask->pool_slot] == at.slot_number();
        }
        if (in) {
          const std::uint32_t i = lo.pool()->ask_pool_slot;
          in = i < o.book->ask_pools.size() && o.book->ask_pools[i].lp == lo.pool();
        }
      }
      if (!in) fail("open order not in book: " + to_string(to_order(o)));
      if (in && o.is_sell() && (lo.pool()->book_spot_asks.count(ak) == 1) != spot_now(o)) {
        fail("spot index stale: " + to_string(to_order(o)));
      }
    }
    // Each account's sums are what its open orders (each counted once, none kept out by a command) and its
    // live leases' owed amounts add up to: exposure limits are judged on them.
    std::map<AccountId, Account> sums;
    for (const LiveOrder& lo : orders) {
      if (lo.counted != lo.o.is_open()) fail("account sums: order " + std::to_string(lo.o.id.value) + " counted wrongly");
      if (lo.counted) add_to_sums(sums[lo.o.account], lo.o, 1);
    }
    for (const LiveLease& l : leases) sums[buyer(l)].notional_x3600 += static_cast<Int128>(l.owed()) * 3600;
    // An order list (OrderList): every entry a live, open order that `belongs(order, place)` (its owner's, and it
    // knows its place: distinct places, distinct orders); returns the entries, which the callers match with the
    // open orders' count, so that every open order is in its list.
    const auto check_list = [&](const OrderSlots& items, auto belongs, const std::string& what) {
      for (std::uint32_t j = 0; j < items.size(); ++j) {
        const LiveOrder* lo = orders.holds(items[j]) ? &orders.at_slot(items[j]) : nullptr;
        if (!lo || !lo->o.is_open() || !belongs(*lo, j)) fail(what + " stale at " + std::to_string(j));
      }
      return std::size_t{items.size()};
    };
    // ... and its list holds its open orders, each at its account_slot.
    std::size_t in_lists = 0;
    for (const auto& [id, a] : accounts) {
      const Account& e = sums[id];
      if (a.open_orders != e.open_orders || a.open_gpus != e.open_gpus || a.notional_x3600 != e.notional_x3600) {
        fail("account sums of " + std::to_string(id.value) + " differ from its open orders and leases");
      }
      const AccountId acct = id;
      in_lists += check_list(a.orders.items, [&](const LiveOrder& lo, std::uint32_t j) {
        return lo.o.account == acct && lo.account_slot == j;
      }, "order list of account " + std::to_string(id.value));
    }
    if (in_lists != open) fail("accounts list " + std::to_string(in_lists) + " orders, " + std::to_string(open) + " open");
    // Each pool's list holds its open asks, each at its pool_slot.
    in_lists = 0;
    for (const auto& [id, lp] : pools) {
      const LivePool* pool = &lp;
      in_lists += check_list(lp.asks.items, [&](const LiveOrder& lo, std::uint32_t j) {
        return lo.o.is_sell() && lo.pool() == pool && lo.o.ask->pool_slot == j;
      }, "open asks of pool " + std::to_string(id.value));
    }
    if (in_lists != open_sells) {
      fail("pools list " + std::to_string(in_lists) + " asks, " + std::to_string(open_sells) + " open");
    }
    std::map<PoolId, std::size_t> pool_leases;  // live, by pool
    std::size_t wide = 0;
    for (auto it = leases.begin(); it != leases.end(); ++it) {
      const LiveLease& l = *it;
      if (l.has & LiveLease::kWide) {
        ++wide;
        if (!wide_leases.contains(l.id)) fail("lease " + std::to_string(l.id.value) + " kept apart has no entry");
      }
      const Seconds end = l.status == LeaseStatus::preempted ? std::min(ends_at(l), l.end) : l.end;
      if (l.pool >= pool_list.size() || pool_list[l.pool] == nullptr) {
        fail("lease " + std::to_string(l.id.value) + " names no pool");
        continue;
      }
      const LivePool& lp = pool_of(l);
      held[lp.p.id].add(std::max(l.start, now), std::max(end, now), l.quantity.value);
      if (l.ended) continue;
      ++pool_leases[lp.p.id];
      if (l.pool_slot >= lp.leases.size() || lp.leases[l.pool_slot] != it.slot_number()) {
        fail("lease " + std::to_string(l.id.value) + " not in its place in its pool's leases");
      }
      const LeaseRef key(const_cast<LiveLease&>(l));
      const auto at = lp.spot_leases.lower_bound(key);
      const bool by_price = at != lp.spot_leases.end() && at->l == &l;
      if (by_price != (lp.p.spec.tier == Tier::spot)) {
        fail("lease " + std::to_string(l.id.value) + " in its pool's price order: " + (by_price ? "yes" : "no"));
      } else if (by_price && (at->price != l.price || at->start != l.start || at->end != l.end)) {
        fail("lease " + std::to_string(l.id.value) + ": its entry in its pool's price order out of step");
      }
    }
    if (wide != wide_leases.size()) fail("entries of wide_leases without a live lease kept apart");
    if (pool_index.size() != pools.size()) fail("pool_index holds other entries than the pools");
    if (account_index.size() != accounts.size()) fail("account_index holds other entries than the accounts");
    for (const auto& [id, lp] : pools) {
      if (lp.number >= pool_list.size() || pool_list[lp.number] != &lp) {
        fail("pool " + std::to_string(id.value) + " not at its number in pool_list");
      }
      if (find_pool(id) != &lp) fail("pool " + std::to_string(id.value) + " not found by its id in pool_index");
      // A pool's spot asks widen its run bounds from none (the ask pools' check below), as a new AskPool's did.
      if (lp.book_spot_asks.empty() && lp.spot_runs != RunBounds{}) {
        fail("run bounds of pool " + std::to_string(id.value) + " kept without spot asks");
      }
      auto rn = region_numbers.find(lp.p.spec.region);
      if (rn == region_numbers.end() || rn->second != lp.region) {
        fail("region number of pool " + std::to_string(id.value) + " wrong");
      }
      // Kept group verdicts equal a fresh judgement.
      if (lp.book_number != std::numeric_limits<std::uint32_t>::max()) {
        for (const BidGroup& g : books.at(lp.p.spec.market).bid_groups) {
          if (lp.book_number < g.verdicts.size() && g.verdicts[lp.book_number] >= 0 &&
              (g.verdicts[lp.book_number] == 1) != pool_fits_spec(lp.p, g.rep)) {
            fail("kept verdict of pool " + std::to_string(id.value) + " stale");
          }
        }
      }
      const std::size_t live = pool_leases[id];
      if (lp.leases.size() != live || lp.spot_leases.size() != (lp.p.spec.tier == Tier::spot ? live : 0)) {
        fail("pool " + std::to_string(id.value) + " lists other leases than its live ones");
      }
      // Its list of the groups it may satisfy holds exactly the groups whose spec it fits, once: when current, and
      // when a few groups behind (groups_of brings it up to date from Book::made_slots) once the groups made since
      // are judged again here (by pool_fits_spec, not the kept verdicts). A list further behind is rebuilt whole.
      const Book& pb = books.at(lp.p.spec.market);
      const std::uint64_t behind = pb.groups_made - lp.groups_seen;
      if (lp.groups_seen != 0 && behind <= Book::kMadeSlots) {
        std::vector<std::uint32_t> list = lp.groups_ok;
        for (std::uint64_t m = lp.groups_seen; m != pb.groups_made; ++m) {
          const std::uint32_t slot = pb.made_slots[m % Book::kMadeSlots];
          if (slot >= pb.bid_groups.size()) {
            fail("book's latest groups name slot " + std::to_string(slot) + " past its groups");
            break;
          }
          std::erase(list, slot);
          if (pool_fits_spec(lp.p, pb.bid_groups[slot].rep)) list.push_back(slot);
        }
        std::vector<bool> listed(pb.bid_groups.size(), false);
        for (std::uint32_t gi : list) {
          if (gi >= listed.size() || listed[gi] || !pool_fits_spec(lp.p, pb.bid_groups[gi].rep)) {
            fail("group list of pool " + std::to_string(id.value) + " wrong");
          }
          listed[gi] = true;
        }
        for (std::size_t i = 0; i < pb.bid_groups.size(); ++i) {
          if (!listed[i] && pool_fits_spec(lp.p, pb.bid_groups[i].rep)) {
            fail("group list of pool " + std::to_string(id.value) + " misses group " + std::to_string(i));
          }
        }
      }
      Steps used = lp.used.to_steps();
      used.trim_before(now);
      Steps expect = held[id];
      expect.trim_before(now);
      if (!(used == expect)) fail("pool " + std::to_string(id.value) + " commitments out of step");
      if (expect.max(now, kForever) > lp.p.gpus().value) fail("pool oversold: " + to_string(lp.p));
    }
    // Every pair of resting orders, brute force (no index involved).
    std::map<MarketId, std::vector<const RestOrder*>> open_bids;
    std::map<MarketId, std::vector<const RestOrder*>> open_asks;
    std::int64_t in_groups = 0;
    for (const LiveOrder& lo : orders) {
      if (!lo.o.is_open() || !lo.in_book) continue;
      (lo.o.is_buy() ? open_bids : open_asks)[*lo.o.market()].push_back(&lo.o);
    }
    for (const auto& [m, b] : books) {
      for (const BidGroup& g : b.bid_groups) in_groups += g.resting;
      std::vector<SpotPool> by_price;
      for (const AskPool& ap : b.ask_pools) {
        if (ap.spot_cheapest != kNoSpotAsk) by_price.push_back({ap.spot_cheapest, ap.lp});
      }
      std::sort(by_price.begin(), by_price.end());
      if (by_price.size() != b.spot_by_price.size() ||
          !std::equal(by_price.begin(), by_price.end(), b.spot_by_price.begin(),
                      [](const SpotPool& x, const SpotPool& y) { return x.cheapest == y.cheapest && x.lp == y.lp; })) {
        fail("spot pools by price out of step with the ask pools' cheapest");
      }
      Price best_duration(std::numeric_limits<std::int64_t>::min());
      Price best_fixed(std::numeric_limits<std::int64_t>::min());
      std::int64_t n_fixed = 0;
      for (const RestOrder* bid : open_bids[m]) {
        Price& best = bid->is_duration_bid() ? best_duration : best_fixed;
        best = std::max(best, bid->request.price);
        n_fixed += bid->is_duration_bid() ? 0 : 1;
      }
      if (b.duration_ceiling_stale ? best_duration > b.duration_ceiling : best_duration != b.duration_ceiling) {
        fail("duration bid ceiling " + std::to_string(b.duration_ceiling.value) + " for a best duration bid of " +
             std::to_string(best_duration.value));
      }
      if (best_fixed > b.fixed_ceiling || n_fixed != b.fixed_bids ||
          (n_fixed == 0 && b.fixed_ceiling.value != std::numeric_limits<std::int64_t>::min())) {
        fail("fixed bid ceiling " + std::to_string(b.fixed_ceiling.value) + " for " + std::to_string(n_fixed) +
             " fixed bids, the best at " + std::to_string(best_fixed.value));
      }
      for (std::size_t i = 0; i < b.ask_pools.size(); ++i) {
        const AskPool& ap = b.ask_pools[i];
        std::int64_t n = 0;  // its asks in the book (its list is checked with every pool's)
        for (OrderSlot s : ap.lp->asks.items) n += orders.holds(s) && orders.at_slot(s).in_book;
        for (const AskKey& k : ap.lp->book_spot_asks) {
          if (!ap.lp->spot_runs.bounds(k)) fail("spot ask run bounds miss: " + std::to_string(k.id.value));
          AskKey fresh = k;
          summarize_runs(k.lo->o, fresh);
          if (fresh.run_lead != k.run_lead || fresh.run_tail != k.run_tail || fresh.max_run != k.max_run) {
            fail("spot ask key's run summary stale: " + std::to_string(k.id.value));
          }
        }
        const AskSet& spot = ap.lp->book_spot_asks;
        if (spot.empty() ? ap.spot_cheapest != kNoSpotAsk
                         : ap.spot_cheapest != spot.begin()->effective) {
          fail("spot cheapest of pool " + std::to_string(ap.lp->p.id.value) + " out of step");
        }
        if (ap.lp->ask_pool_slot != i || n == 0 || n != ap.lp->book_count) {
          fail("ask pool index of pool " + std::to_string(ap.lp->p.id.value) + " out of step");
        }
      }
      // The free-run index (once built) holds exactly the runs of the resting asks, recomputed, each in its
      // cell; before, it is empty.
      std::size_t runs = 0;
      for (const AskPool& ap : b.ask_pools) {
        if (!b.free_runs.enabled) break;
        // A pool in ask_pools has asks in the book (checked above), so its runs are indexed and it is numbered.
        if (ap.lp->run_number >= b.free_runs.pools.size() || b.free_runs.pools[ap.lp->run_number] != ap.lp ||
            b.free_runs.region_bit_numbers.size() != b.free_runs.pools.size()) {
          fail("free run index: pool " + std::to_string(ap.lp->p.id.value) + " not numbered");
          continue;
        }
        if (b.free_runs.region_bit_numbers[ap.lp->run_number] != region_bit_number(ap.lp->region)) {
          fail("free run index: pool " + std::to_string(ap.lp->p.id.value) + "'s region bit out of step");
        }
        for (OrderSlot s : ap.lp->asks.items) {
          if (!orders.holds(s) || !orders.at_slot(s).in_book) continue;
          const LiveOrder* lo = &orders.at_slot(s);
          for_each_run(lo->o, [&](Seconds from, Seconds to) {
            const std::optional<RunEntry> e = run_entry(*lo, from, to);
            if (!e) return;
            ++runs;
            bool found = false;
            if (const RunCell* cell = b.free_runs.find_cell(*e)) {
              const RunSet& set = cell->by_tier[tier_index(ap.lp->p.spec.tier)];
              auto it = set.lower_bound(*e);
              found = it != set.end() && *it == *e;
            }
            if (!found) fail("free run of ask " + std::to_string(lo->o.id.value) + " not indexed");
          });
        }
      }
      std::size_t indexed = 0;
      for (std::size_t r = 0; r < b.free_runs.rows.size(); ++r) {
        const RunRow& row = b.free_runs.rows[r];
        const std::size_t before = indexed;
        if (row.least.size() != row.cells.size()) fail("free run index: a row's least prices out of step");
        for (std::size_t c = 0; c < row.cells.size(); ++c) {
          const RunCell& cell = row.cells[c];
          if (c < row.least.size() && row.least[c] != *std::min_element(cell.cheapest.begin(), cell.cheapest.end())) {
            fail("free run index: a cell's least out of step");
          }
          for (std::size_t t = 0; t < kTiers; ++t) {
            const std::int64_t least = cell.by_tier[t].empty() ? RunCell::kNoRun : cell.by_tier[t].begin()->effective.value;
            if (cell.cheapest[t] != least) fail("free run index: a cell's cheapest out of step");
            std::uint64_t regions = 0;
            const RunEntry* prev = nullptr;
            for (const RunEntry& e : cell.by_tier[t]) {
              regions |= region_bit(b.free_runs.pools[e.pool]->region);
              if (prev && !RunEntryLess{}(*prev, e)) fail("free run index: cell out of order");
              if (tier_index(b.free_runs.pools[e.pool]->p.spec.tier) != t) fail("free run index: run in another tier");
              // Its cell from run_slot, not the index's own week_of (which the index finds cells by).
              const std::int64_t start_row = run_slot(Seconds(e.start)) - b.free_runs.first_week;
              if (std::max<std::int64_t>(start_row, 0) != static_cast<std::int64_t>(r) ||
                  RunIndex::cell_at(r, run_slot(Seconds(e.end)) - b.free_runs.first_week) != c) {
                fail("free run index: run in another cell");
              }
              prev = &e;
              ++indexed;
            }
            // Exact for a set of one chunk; a superset for one of more (RunCell::regions).
            const bool one_chunk = cell.by_tier[t].chunks().size() <= 1;
            if (one_chunk ? cell.regions[t] != regions : (cell.regions[t] & regions) != regions) {
              fail("free run index: a cell's regions out of step");
            }
          }
        }
        if (row.size != indexed - before) fail("free run index: a row's count out of step");
      }
      if (indexed != runs || indexed != b.free_runs.size) {
        fail("free run index holds " + std::to_string(indexed) + " runs, the asks have " + std::to_string(runs));
      }
      for (const auto& [cons, cached] : b.group_by_cons) {
        BidConstraints rep = *cons;
        rep.regions.clear();
        if (cons != &*cached.cons || cached.group < 0 || static_cast<std::size_t>(cached.group) >= b.bid_groups.size()) {
          fail("constraint set cached in no group");
        } else if (b.cached_group(cons) >= 0 && !(b.bid_groups[static_cast<std::size_t>(cached.group)].rep == rep)) {
          fail("constraint set cached in the wrong group");
        }
      }
      // Each group has the open bids that name it and is indexed by its key; one without them is listed once.
      std::vector<std::int64_t> users(b.bid_groups.size(), 0);
      for (const LiveOrder& lo : orders) {
        if (!lo.o.is_buy() || lo.o.book != &b || lo.bid_group < 0) continue;
        if (!lo.o.is_open() || static_cast<std::size_t>(lo.bid_group) >= users.size()) {
          fail("bid " + std::to_string(lo.o.id.value) + " holds a group it should not");
        } else {
          ++users[static_cast<std::size_t>(lo.bid_group)];
        }
      }
      std::vector<bool> listed(b.bid_groups.size(), false);
      for (int f : b.free_groups) {
        if (f < 0 || static_cast<std::size_t>(f) >= listed.size() || listed[static_cast<std::size_t>(f)]) {
          fail("constraint group listed wrong");
        } else {
          listed[static_cast<std::size_t>(f)] = true;
        }
      }
      for (std::size_t i = 0; i < b.bid_groups.size(); ++i) {
        const BidGroup& g = b.bid_groups[i];
        auto key = b.group_index.find(constraint_key(g.rep));
        if (g.users != users[i] || g.listed != listed[i] || g.resting > g.users ||
            (g.users == 0 && !g.listed && static_cast<int>(i) != b.unconstrained_group) ||
            key == b.group_index.end() || key->second != static_cast<int>(i)) {
          fail("constraint group " + std::to_string(i) + " kept wrong");
        }
      }
      if (b.group_index.size() != b.bid_groups.size()) fail("constraint group index out of step");
      // The fixed bid indexes hold only the entries counted above (each found in its cell there), in order.
      std::size_t bid_entries = 0;
      const auto check_bids = [&](const BidIndex& ix) {
        std::size_t n = 0;
        std::int64_t top = kNoBid;
        for (std::size_t r = 0; r < ix.rows.size(); ++r) {
          const BidRow& row = ix.rows[r];
          if (row.cells.empty()) fail("fixed bid index: empty row");
          if (r > 0 && ix.rows[r - 1].start_week >= row.start_week) fail("fixed bid index: rows out of order");
          std::int64_t row_top = kNoBid;
          for (std::size_t c = 0; c < row.cells.size(); ++c) {
            const BidCell& cell = row.cells[c];
            if (cell.bids.empty()) fail("fixed bid index: empty cell");
            if (c > 0 && row.cells[c - 1].end_week >= cell.end_week) fail("fixed bid index: cells out of order");
            if (!cell.bids.empty() && cell.best != cell.bids.begin()->price.value) fail("fixed bid index: best out of step");
            row_top = std::max(row_top, cell.best);
            const BidEntry* prev = nullptr;
            for (const BidEntry& e : cell.bids) {
              if (prev && !BidEntryLess{}(*prev, e)) fail("fixed bid index: cell out of order");
              if (run_slot(e.start) != row.start_week || run_slot(e.end) != cell.end_week) fail("fixed bid index: wrong cell");
              prev = &e;
              ++n;
            }
          }
          if (row_top != row.best) fail("fixed bid index: a row's best out of step");
          top = std::max(top, row_top);
        }
        if (n != ix.size) fail("fixed bid index: size out of step");
        if (top != ix.best) fail("fixed bid index: its best out of step");
        bid_entries += n;
      };
      // A duration set's best is its first bid's price.
      const auto check_duration = [&](const BidSets& s) {
        if (s.duration_best != (s.duration.empty() ? kNoBid : s.duration.begin()->price.value)) {
          fail("duration set's best price " + std::to_string(s.duration_best) + " stale");
        }
      };
      for (const BidGroup& g : b.bid_groups) {
        check_bids(g.any.fixed);
        check_duration(g.any);
        for (const auto& s : g.by_region) {
          if (!s) continue;
          check_bids(s->fixed);
          check_duration(*s);
        }
      }
      const auto fe = fixed_entries.find(&b);
      if (bid_entries != (fe == fixed_entries.end() ? 0 : fe->second)) {
        fail("fixed bid index holds " + std::to_string(bid_entries) + " entries, more than the resting bids'");
      }
      if (b.halted) continue;
      for (const RestOrder* bid : open_bids[m]) {
        for (const RestOrder* ask : open_asks[m]) {
          if (ask->effective_price() > bid->request.price) continue;
          if (eligible_qty(*bid, bid->remaining, *ask, bid_start(*bid), bid_end(*bid)).value > 0) {
            fail("crossed: bid " + std::to_string(bid->id.value) + " ask " + std::to_string(ask->id.value));
          }
        }
      }
    }
    std::int64_t resting_bids = 0;
    for (const auto& [m, v] : open_bids) resting_bids += static_cast<std::int64_t>(v.size());
    if (in_groups != resting_bids) fail("bid groups count " + std::to_string(in_groups) + " resting bids");
    // Views equal a recomputation from the resting orders.
    std::map<ViewKey, View> fresh;
    for (const LiveOrder& lo : orders) {
      const Shown s = compute_shown(lo);
      if (ShownMark(s) != lo.shown) fail("order " + std::to_string(lo.o.id.value) + " shown mark stale");
      if (!s.shown) continue;
      View& v = fresh[ViewKey{*lo.o.market(), s.bucket}];
      if (s.constrained) {
        v.constrained.orders += 1;
        v.constrained.gpus += s.qty;
      } else {
        (s.side == Side::buy ? v.bids : v.asks).add(s.price, s.qty);
      }
    }
    for (const auto& [k, v] : views) {
      const View& f = fresh[k];
      if (f.bids != v.bids || f.asks != v.asks || !(f.constrained == v.constrained)) {
        fail("view " + std::string(k.market.value()) + " " + to_string(k.bucket) + " differs from its orders");
      }
    }
    for (const auto& [k, v] : fresh) {
      if (!views.count(k) && (!v.bids.empty() || !v.asks.empty())) fail("missing view " + std::string(k.market.value()));
    }
    return err;
  }

  // ---------------------------------------------------------------- snapshot and restore

  EngineState snapshot() const {
    EngineState s;
    s.last_seq = last_seq;
    s.now = now;
    s.next_trade_id = next_trade;
    s.next_lease_id = next_lease;
    s.policy = policy;
    for (const auto& [id, lp] : pools) s.pools.push_back(lp.p);
    // In id order; sorted as pointers so that each order is copied once (the server snapshots books of
    // 100,000+ orders while commands wait).
    std::vector<const RestOrder*> open;
    open.reserve(orders.size());
    for (const LiveOrder& lo : orders) {
      if (lo.o.is_open()) open.push_back(&lo.o);
    }
    std::sort(open.begin(), open.end(), [](const RestOrder* a, const RestOrder* b) { return a->id < b->id; });
    s.open_orders.reserve(open.size());
    for (const RestOrder* o : open) {
      s.open_orders.push_back(to_order(*o));
      refresh_ask_accounting(s.open_orders.back());  // lapsed/free as of now
    }
    s.leases.reserve(leases.size());
    for (const LiveLease* l : leases_by_id()) s.leases.push_back(to_lease(*l));
    for (const auto& [id, a] : accounts) {
      if (a.custom) s.limits.emplace_back(id, a.limits);
    }
    for (const auto& [id, b] : books) {
      if (b.halted) s.halted_markets.push_back(id);
    }
    for (const auto& [k, v] : views) {
      if (v.sequence > 0) s.view_sequences.push_back(ViewSequence{k.market, k.bucket, v.sequence});
    }
    for (const auto& [k, f] : finished_cids) s.finished.push_back(FinishedOrder{f.order, f.body_hash, f.done_seq});
    return s;
  }

  // A snapshot's pools within kMaxPoolGpus, and what each pool's asks and leases hold within 0..kMaxPoolGpus at
  // every instant (what LivePool::used may hold; every snapshot the engine writes passes).
  static void check_commitments(const EngineState& s) {
    std::map<PoolId, std::vector<std::pair<Seconds, std::int64_t>>> changes;
    for (const Pool& p : s.pools) {
      if (std::int64_t{p.spec.gpus_per_node} * p.spec.nodes > kMaxPoolGpus) {
        throw std::invalid_argument("snapshot: pool " + std::to_string(p.id.value) + " has more GPUs than a pool may");
      }
    }
    for (const Lease& l : s.leases) {
      const Seconds held_end = l.status == LeaseStatus::preempted && l.ends_at ? std::min(*l.ends_at, l.end) : l.end;
      if (l.start < held_end) {
        changes[l.pool].emplace_back(l.start, l.quantity.value);
        changes[l.pool].emplace_back(held_end, -l.quantity.value);
      }
    }
    for (const Order& o : s.open_orders) {
      if (!o.is_sell()) continue;
      for (const Step& p : o.free.pieces()) {
        changes[o.request.pool].emplace_back(p.from, p.gpus);
        changes[o.request.pool].emplace_back(p.to, -p.gpus);
      }
    }
    for (auto& [pool, c] : changes) {
      std::sort(c.begin(), c.end());  // at one instant, what ends before what starts
      Int128 held = 0;
      for (const auto& [t, d] : c) {
        held += d;
        if (held < 0 || held > kMaxPoolGpus) {
          throw std::invalid_argument("snapshot: pool " + std::to_string(pool.value) + " holds more GPUs than a pool may");
        }
      }
    }
  }

  void restore(const EngineState& s) {
    last_seq = s.last_seq;
    now = s.now;
    next_trade = s.next_trade_id;
    next_lease = s.next_lease_id;
    policy = s.policy;
    for (const auto& [id, lim] : s.limits) {
      Account& a = account(id);
      a.limits = lim;
      a.custom = true;
    }
    for (const MarketId& m : s.halted_markets) books.at(m).halted = true;
    for (const ViewSequence& v : s.view_sequences) views[ViewKey{v.market, v.bucket}].sequence = v.sequence;
    check_commitments(s);
    for (const Pool& p : s.pools) {
      LivePool& lp = add_pool(p.id);
      lp.p = p;
      lp.region = region_number(p.spec.region);
      if (p.spec.tier == Tier::spot && !p.retired) books.at(p.spec.market).spot_pools.emplace(p.id, &lp);
      schedule_pool(lp);
    }
    for (const Lease& l : s.leases) {
      LivePool& lp = pools.at(l.pool);
      // A snapshot holds live leases only, each of its pool's provider and market (what LiveLease keeps).
      if (l.ended || l.billed != 0 || l.provider != lp.p.provider || l.market != lp.p.spec.market ||
          (l.status == LeaseStatus::preempted && !l.ends_at)) {
        throw std::invalid_argument("snapshot: lease " + std::to_string(l.id.value) + " is not a live lease of its pool");
      }
      if (!Qty32::holds(l.quantity) || !Qty32::holds(l.ask_min_chunk)) {
        throw std::invalid_argument("snapshot: lease " + std::to_string(l.id.value) + ": quantity or lot out of bounds");
      }
      const auto at = leases.emplace_new(l.id);
      LiveLease& ref = *at;
      ref = LiveLease{.id = l.id,
                      .sell_order = l.sell_order,
                      .start = l.start,
                      .end = l.end,
                      .price = l.price,
                      .amount = l.owed,
                      .pool = lp.number,
                      .quantity = Qty32(l.quantity),
                      .status = l.status,
                      .interruptible = l.interruptible,
                      .ended = false};
      ref.set_ask_withdrawn(l.ask_withdrawn);
      set_trade_fields(ref, l.buyer, l.trade, l.buy_order, l.list_price, l.green_discount_bps, l.bucket);
      if (l.ends_at) set_ends_at(ref, *l.ends_at);
      set_ask_terms(ref, l.ask_window_start, l.ask_window_end, l.ask_min_duration, l.ask_min_chunk);
      set_ask_list_price(ref, l.ask_list_price);
      if (l.preempted_at) set_preempted_at(ref, *l.preempted_at);
      if (l.split_from) set_split_from(ref, l.split_from);
      add_to_pool(ref, at.slot_number());
      const Seconds held_end = l.status == LeaseStatus::preempted ? std::min(*l.ends_at, l.end) : l.end;
      lp.used.add(l.start, held_end, l.quantity.value);
      account(l.buyer).notional_x3600 += static_cast<Int128>(ref.amount) * 3600;
      schedule_lease(ref);
    }
    for (const Order& o : s.open_orders) {
      const auto at = orders.emplace(o.id, LiveOrder{}).first;
      LiveOrder& lo = *at;
      lo.o = rest_of(Order(o));
      lo.o.bucket = order_bucket(lo.o);  // as placed (refresh_view keeps a month until the order turns spot)
      account(o.account).orders.add<account_slot>(lo, at.slot_number());
      if (!o.request.client_order_id.empty()) open_cids[CidKey{o.account, o.request.client_order_id}] = o.id;
      if (o.is_sell()) {
        LivePool& lp = pools.at(o.request.pool);
        lp.asks.add<pool_slot>(lo, at.slot_number());
        for (const Step& p : o.free.pieces()) lp.used.add(p.from, p.to, p.gpus);
      }
      hook(lo, true);
    }
    for (const LiveLease* l : leases_by_id()) {
      if (auto seller = orders.find(l->sell_order); seller != orders.end()) add_sold(*seller, l->id);
    }
    for (const FinishedOrder& f : s.finished) {
      finished_cids[CidKey{f.order.account, f.order.request.client_order_id}] = Finished{f.order, f.body_hash, f.done_seq};
    }
    n_touched = 0;
    last_touched = nullptr;
  }

  std::uint64_t digest() const { return state_digest(snapshot()); }

  static std::uint64_t state_digest(const EngineState& s) {
    Fnv1a h;
    h.i64(s.last_seq);
    h.i64(s.now.value);
    h.i64(s.next_trade_id);
    h.i64(s.next_lease_id);
    for (const GreenTierRule& r : s.policy.rules) {
      h.i64(static_cast<std::int64_t>(r.tier));
      h.i64(r.max_pue_x1000);
      h.i64(r.min_renewable_pct_x100);
      h.i64(r.max_carbon_g_per_kwh_x100);
      h.i64(r.discount_bps);
    }
    for (const Pool& p : s.pools) h.str(to_string(p));
    for (const Order& o : s.open_orders) h.str(to_string(o));
    for (const Lease& l : s.leases) h.str(to_string(l));
    for (const auto& [a, lim] : s.limits) {
      h.i64(a.value);
      h.i64(lim.max_open_gpus.value);
      h.i64(lim.max_open_notional);
      h.i64(lim.max_open_orders);
    }
    for (const MarketId& m : s.halted_markets) h.str(m.value());
    for (const ViewSequence& v : s.view_sequences) {
      h.str(v.market.value());
      h.i64(v.bucket.yyyymm);
      h.i64(static_cast<std::int64_t>(v.sequence));
    }
    return h.value();
  }
};

Engine::Engine(EngineConfig config) : impl_(std::make_unique<Impl>(std::move(config))) {}
Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

void Engine::apply(const Command& cmd, EventSink& out) { impl_->apply(cmd, out); }

Depth Engine::depth(const MarketId& market, Bucket bucket, int levels) const {
  Depth d;
  auto it = impl_->views.find(ViewKey{market, bucket});
  if (it == impl_->views.end()) return d;
  const View& v = it->second;
  d.sequence = v.sequence;
  d.constrained_bids = v.constrained;
  // The best `levels` of a side: bids by price descending, asks ascending.
  const auto best = [levels](const Levels& side, std::vector<Level>& out, auto better) {
    side.for_each([&](Price price, Qty qty) { out.push_back(Level{price, qty}); });
    const auto n = std::min<std::size_t>(out.size(), static_cast<std::size_t>(std::max(levels, 0)));
    const auto by = [&](const Level& a, const Level& b) { return better(a.price, b.price); };
    std::partial_sort(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), out.end(), by);
    out.resize(n);
  };
  best(v.bids, d.bids, std::greater<>{});
  best(v.asks, d.asks, std::less<>{});
  return d;
}

const Order* Engine::order(OrderId id) const {
  auto it = impl_->orders.find(id);
  if (it == impl_->orders.end() || !it->o.is_open()) return nullptr;
  Order& o = impl_->query_orders.emplace_back();
  impl_->query_answers = true;
  Impl::fill_order(o, it->o);
  return &o;
}

std::optional<Order> Engine::order_now(OrderId id) const {
  const Order* o = order(id);
  if (!o) return std::nullopt;
  Order out = *o;
  impl_->refresh_ask_accounting(out);
  if (!out.is_buy()) out.free.trim_before(std::max(impl_->now, out.window_start));
  return out;
}

std::size_t Engine::constraint_groups(const MarketId& market) const {
  auto it = impl_->books.find(market);
  return it == impl_->books.end() ? 0 : it->second.bid_groups.size();
}

std::size_t Engine::live_pools(AccountId provider) const {
  std::size_t n = 0;
  for (const auto& [id, lp] : impl_->pools) n += lp.p.provider == provider && !lp.p.retired;
  return n;
}

std::vector<Order> Engine::open_orders(AccountId account, const std::optional<MarketId>& market) const {
  std::vector<Order> out;
  auto it = impl_->accounts.find(account);
  if (it == impl_->accounts.end()) return out;
  for (OrderId id : it->second.orders.ids(impl_->orders)) {
    const RestOrder& o = impl_->orders.at(id).o;
    if (market && *o.market() != *market) continue;
    out.push_back(Impl::to_order(o));
    impl_->refresh_ask_accounting(out.back());
  }
  return out;
}

const Lease* Engine::lease(LeaseId id) const {
  auto it = impl_->leases.find(id);
  if (it == impl_->leases.end()) return nullptr;
  impl_->query_answers = true;
  return &impl_->query_leases.emplace_back(impl_->to_lease(*it));
}

std::vector<Lease> Engine::leases(AccountId account) const {
  std::vector<Lease> out;
  for (const LiveLease* l : impl_->leases_by_id()) {
    if (impl_->buyer(*l) == account || impl_->pool_of(*l).p.provider == account) out.push_back(impl_->to_lease(*l));
  }
  return out;
}

const Pool* Engine::pool(PoolId id) const {
  const LivePool* lp = impl_->find_pool(id);
  return lp ? &lp->p : nullptr;
}

std::optional<PoolCapacity> Engine::pool_capacity(PoolId id, Seconds from, Seconds to) const {
  const LivePool* found = impl_->find_pool(id);
  if (!found) return std::nullopt;
  const LivePool& lp = *found;
  PoolCapacity c;
  c.gpus = lp.p.gpus();
  for (const std::uint32_t slot : lp.leases) {
    const LiveLease& l = impl_->leases.at_slot(slot);
    const Seconds held_end = l.status == LeaseStatus::preempted ? std::min(impl_->ends_at(l), l.end) : l.end;
    c.leased.add(std::max(l.start, from), std::min(held_end, to), l.quantity.value);
  }
  for (OrderSlot n : lp.asks.items) {
    for (const Step& p : impl_->orders.at_slot(n).o.ask->free.pieces()) {
      c.offered.add(std::max(p.from, from), std::min(p.to, to), p.gpus);
    }
  }
  c.unallocated.add(from, to, c.gpus.value);
  for (const Step& p : c.leased.pieces()) c.unallocated.add(p.from, p.to, -p.gpus);
  for (const Step& p : c.offered.pieces()) c.unallocated.add(p.from, p.to, -p.gpus);
  return c;
}

std::vector<QuoteFill> Engine::quote(const OrderRequest& buy, AccountId account) const {
  return impl_->quote(buy, account);
}

bool Engine::halted(const MarketId& market) const {
  auto it = impl_->books.find(market);
  return it != impl_->books.end() && it->second.halted;
}

std::uint64_t Engine::digest() const { return impl_->digest(); }
Seq Engine::last_seq() const { return impl_->last_seq; }
Seconds Engine::now() const { return impl_->now; }
const EngineConfig& Engine::config() const { return impl_->cfg; }

void Engine::committed_through(Seq seq) {
  auto& f = impl_->finished_cids;
  for (auto it = f.begin(); it != f.end();) {
    if (it->second.done_seq <= seq) {
      it = f.erase(it);
    } else {
      ++it;
    }
  }
}

EngineState Engine::snapshot() const { return impl_->snapshot(); }
std::uint64_t Engine::digest(const EngineState& state) { return Impl::state_digest(state); }
std::string Engine::check_invariants() const { return impl_->check_invariants(); }

Engine Engine::restore(EngineConfig config, const EngineState& state) {
  Engine e(std::move(config));
  e.impl_->restore(state);
  return e;
}

}  // namespace gpuex::matching
