// A sorted set of keys kept by price level: the book sets of resting asks and duration bids.
//
// A book set's keys are ordered by price, then priority. A new order always has the latest priority, so it
// goes at the end of its price level; a ChunkedSet found that place by two binary searches over whole keys
// (~250 instructions of compares for a set of a few thousand) and moved half a chunk of keys up. Here each
// level (the keys of one price, in order) is a vector of its own: an insert binary-searches the levels by
// price alone and, in the usual case, appends; an erase searches its level only and moves the keys after
// it in that level. Levels sit in sorted chunks of at most kMax (as ChunkedSet's keys), so that a book of
// many prices with one order each (the realistic workload's) inserts and erases a level at the cost of a
// chunk's moves, not the whole book's.
//
// A price level holds at most kKeys keys in one vector; a level with more is kept as several consecutive
// levels of the same price ("sublevels", each non-empty, at most kKeys), so that an erase moves at most kKeys
// keys and a growing level never reallocates more than kKeys of them: the plain workload's book grows to
// hundreds of orders a price, where a cancel moved half of its level (~30 KB of keys) and an append now and
// then copied all of it (bench/README.md, "session 15: latency tails").
//
// In a set of many levels, locate() starts from the level its hints (hints_) remember for the key's price, when
// that level is still the price's first, instead of searching.
//
// `Less` orders keys; `Less::level(key)` is the key's level, a number that orders the levels as Less
// orders their keys (keys of a lower level are less); `Less::in_level(a, b)` is Less for two keys of one level
// (by what tells them apart there: for the book sets, priority and id without the price every key of a level
// shares), used wherever the set compares keys of one level: the searches within a level, and a level's last key
// with a key of its level. Iteration is in key order; like ChunkedSet, insert
// and erase invalidate every iterator of the set (walks re-seek by key when version() changed).
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <numeric>
#include <utility>
#include <vector>

namespace gpuex::matching {

template <class Key, class Less>
class LevelSet {
  struct Level {
    std::int64_t at;
    std::vector<Key> keys;  // non-empty, sorted by Less
  };
  using Chunk = std::vector<Level>;
  struct InLevel {  // Less for keys of one level
    bool operator()(const Key& a, const Key& b) const { return Less::in_level(a, b); }
  };

 public:
  static constexpr std::size_t kMax = 32;   // levels in a chunk above this split it in two
  static constexpr std::size_t kKeys = 64;  // keys in a level (a sublevel of its price) at most

  class const_iterator {
   public:
    const_iterator() = default;
    const Key& operator*() const { return *p_; }
    const Key* operator->() const { return p_; }
    const_iterator& operator++() {
      if (++p_ == e_) s_->next_level(*this);
      return *this;
    }
    bool operator==(const const_iterator& o) const { return p_ == o.p_; }

   private:
    friend class LevelSet;
    const LevelSet* s_{nullptr};
    std::size_t c_{0};
    std::size_t l_{0};
    const Key* p_{nullptr};  // null: end()
    const Key* e_{nullptr};  // the end of p_'s level
  };

  const_iterator begin() const { return chunks_.empty() ? end() : at(0, 0, 0); }
  const_iterator end() const {
    const_iterator it;
    it.s_ = this;
    return it;
  }
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  // Changes with every insert, erase or replace: an iterator taken at an equal version is still valid.
  std::uint64_t version() const { return version_; }

  // The first key not less than k.
  const_iterator lower_bound(const Key& k) const {
    const std::int64_t a = Less::level(k);
    const auto [c, l] = locate(a, k);
    if (c == chunks_.size()) return end();
    const Level& lv = chunks_[c][l];
    if (lv.at != a) return at(c, l, 0);
    const auto it = std::lower_bound(lv.keys.begin(), lv.keys.end(), k, InLevel{});
    return at(c, l, static_cast<std::size_t>(it - lv.keys.begin()));
  }

  std::size_t count(const Key& k) const { return find(k).first ? 1 : 0; }

  // Inserts k unless an equivalent key is present.
  void insert(const Key& k) {
    ++version_;
    const std::int64_t a = Less::level(k);
    auto [c, l] = locate(a, k);
    if (c < chunks_.size() && chunks_[c][l].at == a) {  // inside a level: an earlier priority (rare)
      std::vector<Key>& keys = chunks_[c][l].keys;
      const auto it = std::lower_bound(keys.begin(), keys.end(), k, InLevel{});
      if (!InLevel{}(k, *it)) return;
      keys.insert(it, k);
      if (keys.size() > kKeys) {  // split off the upper half as the next sublevel
        const auto mid = keys.begin() + static_cast<std::ptrdiff_t>(keys.size() / 2);
        Level upper{a, std::vector<Key>(mid, keys.end())};
        keys.erase(mid, keys.end());
        insert_level(c, l + 1, std::move(upper));
      }
      ++size_;
      return;
    }
    // After every key of its price (the latest priority, the usual case): append to the price's last
    // sublevel, the level just before (c, l), unless it is full or of another price.
    if (l > 0 || c > 0) {
      Level& prev = l > 0 ? chunks_[c][l - 1] : chunks_[c - 1].back();
      if (prev.at == a && prev.keys.size() < kKeys) {
        prev.keys.push_back(k);
        ++size_;
        return;
      }
    }
    if (c == chunks_.size()) {  // after every level: a new level at the end of the last chunk
      if (chunks_.empty()) chunks_.emplace_back();
      c = chunks_.size() - 1;
      l = chunks_[c].size();
    }
    Level lv{a, {}};
    lv.keys.push_back(k);
    insert_level(c, l, std::move(lv));
    ++size_;
  }

  // Overwrites the key equivalent to k with k (fields that do not take part in the order), if present.
  void replace(const Key& k) {
    if (Key* p = find(k).first) {
      ++version_;
      *p = k;
    }
  }

  // Erases the key equivalent to k, if any.
  void erase(const Key& k) {
    const auto [p, cl] = find(k);
    if (!p) return;
    ++version_;
    --size_;
    const auto [c, l] = cl;
    Chunk& ch = chunks_[c];
    std::vector<Key>& keys = ch[l].keys;
    keys.erase(keys.begin() + (p - keys.data()));
    if (keys.empty()) {
      erase_level(c, l);
      return;
    }
    // Keep a price's sublevels from thinning out: merge with the next one in the chunk while both are small.
    if (l + 1 < ch.size() && ch[l + 1].at == ch[l].at && keys.size() + ch[l + 1].keys.size() <= kKeys / 2) {
      std::vector<Key>& next = ch[l + 1].keys;
      keys.insert(keys.end(), next.begin(), next.end());
      erase_level(c, l + 1);
    }
  }

 private:
  struct Hint {
    std::uint32_t c{std::numeric_limits<std::uint32_t>::max()};  // the maximum: no hint
    std::uint32_t l{0};
  };
  static constexpr std::size_t kHintChunks = 4;

  // The first level (chunk, place) not before key k of level a: the first of a higher level, or of level a
  // whose last key is not less than k ({chunks_.size(), 0} if none). From the first level of a's price when
  // the hints know it (see hints_), else by locate_slow().
  std::pair<std::size_t, std::size_t> locate(std::int64_t a, const Key& k) const {
    if (hints_) {
      const Hint h = hints_[hint_slot(a)];
      if (h.c < chunks_.size() && h.l < chunks_[h.c].size() && chunks_[h.c][h.l].at == a && first_of_level(h.c, h.l)) {
        return past_sublevels(h.c, h.l, a, k);
      }
    }
    return locate_slow(a, k);
  }

  // From (c, l), the first level of a, over a's sublevels whose last key is less than k (most prices have one).
  // A function of its own, not a loop in locate(): so GCC inlines the ask set's locate() into insert(), find() and
  // lower_bound() (a call and its frame a lookup otherwise; ~0.12 % of plain's instructions, session 23).
  std::pair<std::size_t, std::size_t> past_sublevels(std::size_t c, std::size_t l, std::int64_t a, const Key& k) const {
    for (;;) {
      const Level& lv = chunks_[c][l];
      if (lv.at != a || !InLevel{}(lv.keys.back(), k)) return {c, l};
      if (++l == chunks_[c].size()) {
        l = 0;
        if (++c == chunks_.size()) return {c, 0};
      }
    }
  }

  // locate() without a hint: by search(), and the hint remembered (out of line: it keeps the callers' inlined
  // locate() small).
  [[gnu::noinline]] std::pair<std::size_t, std::size_t> locate_slow(std::int64_t a, const Key& k) const {
    const auto found = search(a, k);
    if (chunks_.size() >= kHintChunks) {
      if (!hints_ || hint_slots_ < chunks_.size() * kMax) size_hints();  // none in a set moved from
      remember(hints_[hint_slot(a)], a, found);
    }
    return found;
  }

  // Fibonacci hashing of a's number of steps (see size_hints).
  std::size_t hint_slot(std::int64_t a) const {
    return static_cast<std::size_t>((static_cast<std::uint64_t>(a) * hint_mul_) >> hint_shift_);
  }

  // locate() by two binary searches, the chunks' last levels then the chunk's levels. Levels of another price
  // are told apart by `at` alone; only sublevels of k's own price compare keys.
  std::pair<std::size_t, std::size_t> search(std::int64_t a, const Key& k) const {
    const auto before = [&](const Level& lv) { return lv.at < a || (lv.at == a && InLevel{}(lv.keys.back(), k)); };
    const auto c = std::partition_point(chunks_.begin(), chunks_.end(), [&](const Chunk& ch) { return before(ch.back()); });
    if (c == chunks_.end()) return {chunks_.size(), 0};
    const auto l = std::partition_point(c->begin(), c->end(), before);
    return {static_cast<std::size_t>(c - chunks_.begin()), static_cast<std::size_t>(l - c->begin())};
  }

  // True when level (c, l), of level number a, is the first of a's levels (its price's first sublevel).
  bool first_of_level(std::size_t c, std::size_t l) const {
    const std::int64_t a = chunks_[c][l].at;
    if (l > 0) return chunks_[c][l - 1].at != a;
    return c == 0 || chunks_[c - 1].back().at != a;
  }

  // Puts the first level of a into hint h, from what search() found (its level or the one after its last).
  void remember(Hint& h, std::int64_t a, std::pair<std::size_t, std::size_t> found) const {
    auto [c, l] = found;
    const auto back = [&] {  // (c, l) to the level before it; false at the first level
      if (l > 0) {
        --l;
        return true;
      }
      if (c == 0) return false;
      --c;
      l = chunks_[c].size() - 1;
      return true;
    };
    if ((c == chunks_.size() || chunks_[c][l].at != a) && (!back() || chunks_[c][l].at != a)) return;  // none of a
    while (!first_of_level(c, l)) back();
    h = Hint{static_cast<std::uint32_t>(c), static_cast<std::uint32_t>(l)};
  }

  // Empties the hints, as many as the chunks can hold levels (rounded up to a power of two), and fits their hash
  // to the levels' step: the greatest common divisor of the differences of the levels' numbers (a book's prices
  // step by its tick). Fibonacci hashing (times the golden ratio, the fraction's top bits) spreads consecutive
  // numbers evenly over the slots, but numbers of step s only as evenly as s times the golden ratio allows, and
  // not at all evenly when that is, modulo 1, near a fraction of small denominator: for a tick of 100 it is
  // 0.803, near 4/5, and 72 of the plain bench's 201 ask prices shared a slot of 256 with another (24 hashed
  // by their number of ticks). A number off the grid (a later price of a finer step) is still hashed, only not
  // as evenly; the step is found again whenever the hints are resized.
  void size_hints() const {
    const std::size_t want = chunks_.size() * kMax;
    std::uint32_t bits = 0;
    while ((std::size_t{1} << bits) < want) ++bits;
    hints_ = std::make_unique<Hint[]>(std::size_t{1} << bits);
    hint_slots_ = std::uint32_t{1} << bits;
    hint_shift_ = 64 - bits;
    std::uint64_t step = 0;
    const auto first = static_cast<std::uint64_t>(chunks_.front().front().at);
    for (const Chunk& ch : chunks_) {
      for (const Level& lv : ch) step = std::gcd(step, static_cast<std::uint64_t>(lv.at) - first);  // at >= first
    }
    if (step == 0) step = 1;
    // With step = odd << z: numbers r + k * step (r: the grid's offset) times the golden multiplier's top 64 - z
    // bits times the inverse of odd (modulo 2^64) are r times that plus k times the golden multiplier with its
    // last z bits cleared: consecutive k's slots, as Fibonacci hashing of k places them, turned by a constant.
    const int zeros = std::countr_zero(step);
    const std::uint64_t odd = step >> zeros;
    std::uint64_t inverse = odd;  // odd * odd = 1 modulo 8; each step of Newton's doubles the bits that are right
    for (int i = 0; i < 5; ++i) inverse *= 2 - odd * inverse;
    hint_mul_ = (0x9E3779B97F4A7C15ULL >> zeros) * inverse;
  }

  // The key equivalent to k (null if none), with its level's chunk and place. Const for count(); the keys
  // are the set's own (replace and erase write through the pointer).
  std::pair<Key*, std::pair<std::size_t, std::size_t>> find(const Key& k) const {
    const std::int64_t a = Less::level(k);
    const auto cl = locate(a, k);
    if (cl.first == chunks_.size()) return {nullptr, cl};
    const Level& lv = chunks_[cl.first][cl.second];
    if (lv.at != a) return {nullptr, cl};
    const auto it = std::lower_bound(lv.keys.begin(), lv.keys.end(), k, InLevel{});
    if (InLevel{}(k, *it)) return {nullptr, cl};  // lv's last key is not less than k: `it` is a key
    return {const_cast<Key*>(&*it), cl};
  }

  // Inserts a level at place l of chunk c, splitting the chunk when it grows over kMax.
  void insert_level(std::size_t c, std::size_t l, Level&& lv) {
    Chunk& ch = chunks_[c];
    if (ch.size() == ch.capacity()) ch.reserve(std::min(kMax + 1, std::max<std::size_t>(4, ch.size() * 2)));
    ch.insert(ch.begin() + static_cast<std::ptrdiff_t>(l), std::move(lv));
    if (ch.size() > kMax) {
      const auto mid = ch.begin() + static_cast<std::ptrdiff_t>(ch.size() / 2);
      Chunk upper(std::make_move_iterator(mid), std::make_move_iterator(ch.end()));
      ch.erase(mid, ch.end());
      chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(c) + 1, std::move(upper));
    }
  }

  // Erases the (empty) level at place l of chunk c.
  void erase_level(std::size_t c, std::size_t l) {
    Chunk& ch = chunks_[c];
    ch.erase(ch.begin() + static_cast<std::ptrdiff_t>(l));
    if (ch.empty()) {
      chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(c));
    } else if (c + 1 < chunks_.size() && ch.size() + chunks_[c + 1].size() <= kMax / 2) {
      // Keep chunks from thinning out: merge with the next one while both are small.
      Chunk& next = chunks_[c + 1];
      ch.insert(ch.end(), std::make_move_iterator(next.begin()), std::make_move_iterator(next.end()));
      chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(c) + 1);
    }
  }

  // The iterator at key i of level (c, l); past the level's last key, the next level's first.
  const_iterator at(std::size_t c, std::size_t l, std::size_t i) const {
    const_iterator it;
    it.s_ = this;
    it.c_ = c;
    it.l_ = l;
    const std::vector<Key>& keys = chunks_[c][l].keys;
    it.p_ = keys.data() + i;
    it.e_ = keys.data() + keys.size();
    if (it.p_ == it.e_) next_level(it);
    return it;
  }

  void next_level(const_iterator& it) const {
    if (++it.l_ == chunks_[it.c_].size()) {
      ++it.c_;
      it.l_ = 0;
    }
    if (it.c_ == chunks_.size()) {
      it.p_ = it.e_ = nullptr;
      return;
    }
    const std::vector<Key>& keys = chunks_[it.c_][it.l_].keys;
    it.p_ = keys.data();
    it.e_ = keys.data() + keys.size();
  }

  std::vector<Chunk> chunks_;  // each non-empty; levels in increasing `at` across chunks
  std::size_t size_{0};
  std::uint64_t version_{0};

  // Where a level number's first level was last seen, by a hash of the number (one slot each, a later number
  // of the same slot taking it over): locate() starts there when that level is still its number's first, and
  // the binary searches it saves are most of an insert or an erase in a set of many levels (~150 of ~260
  // instructions, bench/README.md "session 19: plain"). A hint goes stale when levels move (a level inserted or
  // erased before it in its chunk, a chunk split or merged); it is then a miss, never wrong, as locate() checks
  // the level it names. Only for sets of kHintChunks chunks or more: in a smaller one the searches are short.
  mutable std::unique_ptr<Hint[]> hints_;  // hint_slots_ of them (size_hints)
  mutable std::uint32_t hint_slots_{0};
  mutable std::uint32_t hint_shift_{64};
  mutable std::uint64_t hint_mul_{0};  // the hash's multiplier, for the levels' step (size_hints)
};

}  // namespace gpuex::matching
