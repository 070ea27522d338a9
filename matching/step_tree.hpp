// A step function of time kept as its changes: a pool's commitments (open asks' free capacity + leases).
//
// Steps keeps the pieces themselves, so adding over [from, to) rewrites every piece inside it: a pool
// whose asks arrive one second apart and last a day has thousands of pieces, and each new ask touched them
// all. Here the function is the running sum of its changes (time -> delta at that instant, zero deltas
// dropped), kept sorted in chunks of up to kChunk (a two-level B-tree, as ChunkedSet), under a segment tree of
// the chunks' sums and largest running sums: add() is two point updates (a search of the chunks' first keys,
// one of a chunk, a shift in it and the path up the segment tree) and max() a scan of its two end chunks and a
// range of the segment tree. A treap of 24-byte nodes did the same in O(log n) too, but its descents went from
// node to node across the pool's array: at a few hundred changes a pool (the realistic bench's leases pile up
// over its 1,000,000 commands) each level was a likely cache miss, and add() was ~9 % of that run.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "matching/steps.hpp"
#include "matching/types.hpp"

namespace gpuex::matching {

class StepTree {
 public:
  StepTree() = default;
  StepTree(const StepTree& o) : tree_(o.tree_), leaves_(o.leaves_), count_(o.count_) {
    int i = 0;
    try {
      for (; i < count_; ++i) leaf(i).chunk = new Chunk(*o.leaf(i).chunk);
    } catch (...) {  // no destructor runs for a half-made copy: its chunks so far go here
      for (int j = 0; j < i; ++j) delete leaf(j).chunk;
      throw;
    }
  }
  StepTree& operator=(const StepTree& o) {
    if (this != &o) {
      StepTree copy(o);
      swap(copy);
    }
    return *this;
  }
  // A moved-from tree is empty and usable.
  StepTree(StepTree&& o) noexcept { swap(o); }
  StepTree& operator=(StepTree&& o) noexcept {
    if (this != &o) {
      StepTree gone(std::move(o));
      swap(gone);
    }
    return *this;
  }
  ~StepTree() {
    for (int i = 0; i < count_; ++i) delete leaf(i).chunk;
  }

  // Adds `delta` over [from, to).
  [[gnu::noinline]] void add(Seconds from, Seconds to, std::int64_t delta) {
    if (from >= to || delta == 0) return;
    bump(from.value, narrow(delta));
    bump(to.value, narrow(-delta));
  }

  // Largest value over [from, to) (time without a change before it has value 0); 0 for an empty interval.
  std::int64_t max(Seconds from, Seconds to) const {
    if (from >= to || count_ == 0) return 0;
    // The value on [from, first change after from) is the sum of the changes at or before `from`; every
    // change k in (from, to) starts a piece whose value is the sum up to k. Chunk p holds `from`'s place, chunk
    // q the last change before `to` (q >= p, or -1: none); the chunks between lie inside (from, to) whole.
    const int p = locate(from.value);
    const Chunk& a = *leaf(p).chunk;
    const int after_from = static_cast<int>(std::upper_bound(a.keys, a.keys + a.n, from.value) - a.keys);
    std::int64_t run = query(0, p).sum;
    for (int k = 0; k < after_from; ++k) run += a.deltas[k];
    std::int64_t best = run;
    const int q = static_cast<int>(first_after(to.value - 1)) - 1;  // the last chunk whose first key < to
    if (q < p) return best;
    const auto scan = [&](const Chunk& c, int from_k) {
      for (int k = from_k; k < c.n && c.keys[k] < to.value; ++k) {
        run += c.deltas[k];
        best = std::max(best, run);
      }
    };
    scan(a, after_from);
    if (q > p) {
      const Agg between = query(p + 1, q);
      best = std::max(best, run + between.maxpre);
      run += between.sum;
      scan(*leaf(q).chunk, 0);
    }
    return best;
  }

  // Largest value anywhere (0 when empty): an upper bound of max() over any interval, read at the root.
  std::int64_t max_all() const { return count_ == 0 ? 0 : std::max<std::int64_t>(0, tree_[1].agg.maxpre); }

  // Drops history before `t`: the value from `t` on is unchanged.
  void trim_before(Seconds t) {
    // Nothing before `t` (the common case: callers trim at `now` on every change).
    if (count_ == 0 || leaf(0).first >= t.value) return;
    const int p = locate(t.value);
    Chunk& c = *leaf(p).chunk;
    const int upto = static_cast<int>(std::upper_bound(c.keys, c.keys + c.n, t.value) - c.keys);  // >= 1
    if (p == 0 && upto == 1) {
      // One change before `t` and none at it: the value from `t` on is that change's, so it moves to `t` (the
      // sums, which do not depend on the keys, stay).
      c.keys[0] = t.value;
      leaf(0).first = t.value;
      return;
    }
    // The changes up to `t` become one at `t`: the chunks before p go, and the first `upto` changes of p.
    std::int64_t s = query(0, p).sum;
    for (int k = 0; k < upto; ++k) s += c.deltas[k];
    erase_range(c, 0, upto);
    if (s != 0) insert_at(c, 0, t.value, narrow(s));
    const int gone = c.n == 0 ? p + 1 : p;  // the chunks that go, from the first
    if (c.n > 0) {
      leaf(p).first = c.keys[0];
      leaf(p).agg = agg_of(c);
    }
    if (gone == 0) return pull_range(0, 1);
    for (int i = 0; i < gone; ++i) delete leaf(i).chunk;
    erase_leaves(0, gone);
  }

  // The function as pieces (for checks and comparisons with a recomputation).
  Steps to_steps() const {
    Steps out;
    std::int64_t v = 0;
    bool have = false;
    std::int64_t last = 0;
    for (int i = 0; i < count_; ++i) {
      const Chunk& c = *leaf(i).chunk;
      for (int k = 0; k < c.n; ++k) {
        if (have && v != 0) out.add(Seconds(last), Seconds(c.keys[k]), v);
        v += c.deltas[k];
        last = c.keys[k];
        have = true;
      }
    }
    return out;
  }

 private:
  // The changes, sorted, kChunk at most a chunk: 184 bytes, jemalloc's 192-byte class. A change's delta is kept
  // in 32 bits: it is the difference of two running sums, which the engine keeps within 2^31 - 1 (the bounds in
  // engine.cpp). The sums and maxima above are kept in 64.
  static constexpr int kChunk = 15;
  struct Chunk {
    std::int64_t keys[kChunk];
    std::int32_t deltas[kChunk];
    std::int32_t n;
    std::int32_t top;  // the first place where the running sum is largest (agg_of sets it): see bump
  };
  // A range of changes' sum and largest running sum (at a change; kNone when it has none). kNone is far below any
  // running sum, and a sum added to it cannot overflow.
  static constexpr std::int64_t kNone = std::numeric_limits<std::int64_t>::min() / 4;
  struct Agg {
    std::int64_t sum;
    std::int64_t maxpre;
  };
  static Agg combine(const Agg& a, const Agg& b) { return {a.sum + b.sum, std::max(a.maxpre, a.sum + b.maxpre)}; }
  // The segment tree (tree_, 2P slots when not empty, P a power of two): chunk i in key order is leaf P + i (its
  // first key, the chunk, its Agg); slot j < P is the Agg of slots 2j and 2j + 1; leaves past count_ are empty.
  struct Slot {
    std::int64_t first;
    Chunk* chunk;
    Agg agg;
  };
  static std::int32_t narrow(std::int64_t v) { return static_cast<std::int32_t>(v); }

  std::size_t leaves() const { return leaves_; }
  Slot& leaf(int i) { return tree_[leaves() + static_cast<std::size_t>(i)]; }
  const Slot& leaf(int i) const { return tree_[leaves() + static_cast<std::size_t>(i)]; }

  void swap(StepTree& o) noexcept {
    tree_.swap(o.tree_);
    std::swap(leaves_, o.leaves_);
    std::swap(count_, o.count_);
  }

  // The number of chunks whose first key is at most `key`.
  std::size_t first_after(std::int64_t key) const {
    const Slot* l = tree_.data() + leaves();
    return static_cast<std::size_t>(
        std::upper_bound(l, l + count_, key, [](std::int64_t k, const Slot& s) { return k < s.first; }) - l);
  }
  // The chunk where `key` is or would go: the last whose first key is at most `key`, else the first.
  int locate(std::int64_t key) const { return std::max(0, static_cast<int>(first_after(key)) - 1); }

  // A chunk's Agg, and its top with it.
  static Agg agg_of(Chunk& c) {
    Agg a{0, kNone};
    c.top = -1;
    for (int k = 0; k < c.n; ++k) {
      a.sum += c.deltas[k];
      if (a.sum > a.maxpre) {
        a.maxpre = a.sum;
        c.top = k;
      }
    }
    return a;
  }
  // Chunk i's Agg recomputed, and the path above it.
  void refresh(int i) {
    std::size_t j = leaves() + static_cast<std::size_t>(i);
    tree_[j].agg = agg_of(*tree_[j].chunk);
    pull_up(j);
  }
  // The slots above slot j recomputed.
  void pull_up(std::size_t j) {
    for (j >>= 1; j >= 1; j >>= 1) tree_[j].agg = combine(tree_[2 * j].agg, tree_[2 * j + 1].agg);
  }
  // The Agg of chunks [a, b) in key order.
  Agg query(int a, int b) const {
    Agg left{0, kNone};
    Agg right{0, kNone};
    for (std::size_t lo = leaves() + static_cast<std::size_t>(a), hi = leaves() + static_cast<std::size_t>(b); lo < hi;
         lo >>= 1, hi >>= 1) {
      if (lo & 1) left = combine(left, tree_[lo++].agg);
      if (hi & 1) right = combine(tree_[--hi].agg, right);
    }
    return combine(left, right);
  }
  // The inner slots above leaves [from, to) recomputed, level by level.
  void pull_range(std::size_t from, std::size_t to) {
    for (std::size_t lo = (leaves_ + from) >> 1, hi = (leaves_ + to - 1) >> 1; lo >= 1; lo >>= 1, hi >>= 1) {
      for (std::size_t j = lo; j <= hi; ++j) tree_[j].agg = combine(tree_[2 * j].agg, tree_[2 * j + 1].agg);
    }
  }
  // A new leaf for `chunk` at place i, those from i on moved up one: in place while the tree has room (what
  // changed is recomputed above), else a tree twice as wide. Nothing changes if that one's allocation fails.
  void insert_leaf(int i, Chunk* chunk) {
    const Slot fresh{chunk->keys[0], chunk, agg_of(*chunk)};
    if (static_cast<std::size_t>(count_) == leaves_) {
      const auto slot = [&](int k) { return k < i ? leaf(k) : k == i ? fresh : leaf(k - 1); };
      return remake(static_cast<std::size_t>(count_) + 1, slot);
    }
    Slot* l = tree_.data() + leaves_;
    std::move_backward(l + i, l + count_, l + count_ + 1);
    l[i] = fresh;
    ++count_;
    pull_range(static_cast<std::size_t>(std::max(0, i - 1)), static_cast<std::size_t>(count_));
  }
  // Leaves [i, i + m) out (their chunks already freed), those after moved down, in place: the tree keeps its width
  // (at most twice its most chunks so far) until it is empty, so that an erase allocates nothing.
  void erase_leaves(int i, int m) {
    const auto was = static_cast<std::size_t>(count_);
    Slot* l = tree_.data() + leaves_;
    std::move(l + i + m, l + count_, l + i);
    count_ -= m;
    if (count_ == 0) {
      std::vector<Slot>().swap(tree_);
      leaves_ = 0;
      return;
    }
    std::fill(l + count_, l + was, Slot{0, nullptr, Agg{0, kNone}});
    pull_range(static_cast<std::size_t>(std::max(0, i - 1)), was);
  }
  // The tree made again, `n` leaves (leaf k is slot(k)) in the fewest that hold them: built aside and swapped in,
  // so that a failed allocation changes nothing.
  template <class F>
  void remake(std::size_t n, F slot) {
    const std::size_t p = std::bit_ceil(n);
    std::vector<Slot> t(2 * p, Slot{0, nullptr, Agg{0, kNone}});
    for (std::size_t k = 0; k < n; ++k) t[p + k] = slot(static_cast<int>(k));
    for (std::size_t j = p - 1; j >= 1; --j) t[j].agg = combine(t[2 * j].agg, t[2 * j + 1].agg);
    tree_.swap(t);
    leaves_ = static_cast<std::uint32_t>(p);
    count_ = static_cast<int>(n);
  }

  static void insert_at(Chunk& c, int at, std::int64_t key, std::int32_t d) {
    std::copy_backward(c.keys + at, c.keys + c.n, c.keys + c.n + 1);
    std::copy_backward(c.deltas + at, c.deltas + c.n, c.deltas + c.n + 1);
    c.keys[at] = key;
    c.deltas[at] = d;
    ++c.n;
  }
  static void erase_range(Chunk& c, int from, int to) {
    std::copy(c.keys + to, c.keys + c.n, c.keys + from);
    std::copy(c.deltas + to, c.deltas + c.n, c.deltas + from);
    c.n -= to - from;
  }

  // Adds `d` to the change at `key` (making or dropping it).
  void bump(std::int64_t key, std::int32_t d) {
    if (count_ == 0) {
      Chunk* c = new Chunk;
      c->n = 0;
      insert_at(*c, 0, key, d);
      try {
        remake(1, [&](int) { return Slot{key, c, agg_of(*c)}; });
      } catch (...) {
        delete c;
        throw;
      }
      return;
    }
    int i = locate(key);
    Chunk* c = leaf(i).chunk;
    int at = static_cast<int>(std::lower_bound(c->keys, c->keys + c->n, key) - c->keys);
    if (at < c->n && c->keys[at] == key) {
      c->deltas[at] += d;
      if (c->deltas[at] == 0) {
        erase_range(*c, at, at + 1);
        return after_erase(i);
      }
      // The running sums from `at` on moved by d. When the largest is among them and d raised them, or before
      // them and d lowered them, it stays where it was (the first place it is reached), d more or the same: the
      // chunk's Agg without a pass over its changes (most of plain's bumps, which find their change).
      if (d > 0 ? c->top >= at : c->top < at) {
        const std::size_t j = leaves() + static_cast<std::size_t>(i);
        tree_[j].agg.sum += d;
        if (d > 0) tree_[j].agg.maxpre += d;
        return pull_up(j);
      }
      return refresh(i);
    }
    if (c->n == kChunk) {
      split(i);
      i = locate(key);
      c = leaf(i).chunk;
      at = static_cast<int>(std::lower_bound(c->keys, c->keys + c->n, key) - c->keys);
    }
    insert_at(*c, at, key, d);
    if (at == 0) leaf(i).first = key;
    refresh(i);
  }

  // Chunk i (full) in two halves: the upper one's leaf is placed first (the one step that may allocate), then
  // chunk i cut. Out of line: once every ~8 new changes.
  [[gnu::noinline]] void split(int i) {
    Chunk* a = leaf(i).chunk;
    Chunk* b = new Chunk;
    const int half = a->n / 2;
    b->n = a->n - half;
    std::copy(a->keys + half, a->keys + a->n, b->keys);
    std::copy(a->deltas + half, a->deltas + a->n, b->deltas);
    try {
      insert_leaf(i + 1, b);
    } catch (...) {
      delete b;
      throw;
    }
    a->n = half;
    refresh(i);
  }

  // Chunk i lost a change: gone if empty, joined with a neighbour if the two fit in half a chunk.
  void after_erase(int i) {
    Chunk* c = leaf(i).chunk;
    if (c->n > 0) {
      leaf(i).first = c->keys[0];
      // A neighbour holds a change at least, so a chunk of half a chunk or more joins neither: their chunks (a
      // cache miss each) are not read.
      if (c->n >= kChunk / 2) return refresh(i);
      const bool next = i + 1 < count_ && c->n + leaf(i + 1).chunk->n <= kChunk / 2;
      const bool prev = !next && i > 0 && c->n + leaf(i - 1).chunk->n <= kChunk / 2;
      if (!next && !prev) return refresh(i);
    }
    rejoin(i);
  }
  [[gnu::noinline]] void rejoin(int i) {
    Chunk* c = leaf(i).chunk;
    if (c->n == 0) {
      delete c;
      return erase_leaves(i, 1);
    }
    // Into the chunk before (c into prev, or next into c), which keeps its leaf; the other's leaf goes.
    const bool next = i + 1 < count_ && c->n + leaf(i + 1).chunk->n <= kChunk / 2;
    const int keep = next ? i : i - 1;
    Chunk* into = leaf(keep).chunk;
    Chunk* from = leaf(keep + 1).chunk;
    std::copy(from->keys, from->keys + from->n, into->keys + into->n);
    std::copy(from->deltas, from->deltas + from->n, into->deltas + into->n);
    into->n += from->n;
    delete from;
    leaf(keep).first = into->keys[0];
    leaf(keep).agg = agg_of(*into);
    erase_leaves(keep + 1, 1);
  }

  std::vector<Slot> tree_;
  std::uint32_t leaves_{0};  // P: tree_.size() / 2
  int count_{0};             // chunks
};

}  // namespace gpuex::matching
