// A step function of time kept as its changes: a pool's commitments (open asks' free capacity + leases).
//
// Steps keeps the pieces themselves, so adding over [from, to) rewrites every piece inside it: a pool
// whose asks arrive one second apart and last a day has thousands of pieces, and each new ask touched them
// all. Here the function is the running sum of its changes (time -> delta at that instant, zero deltas
// dropped) in a treap whose nodes also hold their subtree's sum and largest running sum, so that add() is
// two point updates and max() two splits: O(log n) both. Priorities are a fixed mix of a node's index,
// so the shape, like the values, is deterministic (the shape never shows in any result).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "matching/size_class.hpp"
#include "matching/steps.hpp"
#include "matching/types.hpp"

namespace gpuex::matching {

class StepTree {
 public:
  StepTree() = default;
  StepTree(const StepTree&) = default;
  StepTree& operator=(const StepTree&) = default;
  // A moved-from tree is empty and usable: its free chain and root go with its nodes (they are indices into them).
  StepTree(StepTree&& o) noexcept
      : nodes_(std::move(o.nodes_)), free_(std::exchange(o.free_, -1)), root_(std::exchange(o.root_, -1)) {
    o.nodes_.clear();
  }
  StepTree& operator=(StepTree&& o) noexcept {
    if (this == &o) return *this;
    nodes_ = std::move(o.nodes_);
    o.nodes_.clear();
    free_ = std::exchange(o.free_, -1);
    root_ = std::exchange(o.root_, -1);
    return *this;
  }

  // Adds `delta` over [from, to).
  [[gnu::noinline]] void add(Seconds from, Seconds to, std::int64_t delta) {
    if (from >= to || delta == 0) return;
    bump(from.value, delta);
    bump(to.value, -delta);
  }

  // Largest value over [from, to) (time without a change before it has value 0); 0 for an empty interval.
  std::int64_t max(Seconds from, Seconds to) const {
    if (from >= to) return 0;
    // The value on [from, first change after from) is the sum of the changes at or before `from`; every
    // change k in (from, to) starts a piece whose value is the sum up to k.
    // One descent for the sum at or before `from`, one pass over (from, to) via the subtree summaries.
    std::int64_t run = sum_upto(from.value);
    std::int64_t best = run;
    max_between(root_, from.value, to.value, run, best, false, false);
    return best;
  }

  // Largest value anywhere (0 when empty): an upper bound of max() over any interval, read at the root.
  std::int64_t max_all() const { return root_ < 0 ? 0 : std::max<std::int64_t>(0, n(root_).maxpre); }

  // Drops history before `t`: the value from `t` on is unchanged.
  void trim_before(Seconds t) {
    // Nothing before `t` (the common case: callers trim at `now` on every change): no split and merge.
    int parent = -1;  // first's (first is its left child)
    int first = root_;
    while (first >= 0 && n(first).l >= 0) {
      parent = first;
      first = n(first).l;
    }
    if (first < 0 || n(first).key >= t.value) return;
    if (!move_first(first, parent, t)) trim_folding(t);
  }

  // The function as pieces (for checks and comparisons with a recomputation).
  Steps to_steps() const {
    std::vector<std::pair<std::int64_t, std::int64_t>> changes;
    collect(root_, changes);
    Steps out;
    std::int64_t v = 0;
    for (std::size_t i = 0; i < changes.size(); ++i) {
      v += changes[i].second;
      if (i + 1 < changes.size() && v != 0) out.add(Seconds(changes[i].first), Seconds(changes[i + 1].first), v);
    }
    return out;
  }

 private:
  // The values in 32 bits (not 40-byte nodes): each is a running sum of the function or the difference of two,
  // and the engine keeps a pool's function between -kMaxQuantity and its GPUs + kMaxQuantity (at most kMaxPoolGpus
  // + kMaxQuantity, the bounds in engine.cpp: the GPUs it holds, plus one change on its way in), inside 2^31 - 1.
  // Changes come in 64 bits and are stored narrowed (narrow).
  //
  // A node's own change (its delta) is not stored: it is its sum less its children's (delta_of), 24-byte nodes
  // instead of 32 (a pool's tree holds two nodes an open ask, ~37 bytes a resting order in the realistic bench).
  // So a node's delta is read before its children change (split, merge) and given back to pull(); a change
  // of d under a node adds d to its sum alone (resum: bump's path).
  //
  // Trivial (no member initializers; make() sets every field), so that the vector moves its nodes with memmove
  // when it grows, not one by one.
  struct Node {
    std::int64_t key;
    std::int32_t sum;     // of the subtree's deltas
    std::int32_t maxpre;  // largest running sum of the subtree's deltas in key order (non-empty prefixes)
    int l;
    int r;
  };
  static_assert(sizeof(Node) == 24 && std::is_trivial_v<Node>);
  static std::int32_t narrow(std::int64_t v) { return static_cast<std::int32_t>(v); }

  // A node's treap priority: a fixed bijective mix of its index (murmur3's finalizer), so a node stores none
  // (8 bytes less a node). Distinct nodes have distinct priorities, independent of their keys.
  static std::uint32_t prio(int i) {
    auto x = static_cast<std::uint32_t>(i);
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    return x;
  }

  // Node i is nodes_[i + 1]: nodes_[0] is "no node" (-1), a sentinel with sum 0 and the lowest maxpre, so that
  // pull, resum and delta_of read a missing child as they read a node (the same sums and maxpre as with a test
  // for it, ~4 instructions a node of every bump's path fewer), and bump's descent stops at it (its key set to
  // the one looked for). It is made with the first node (an empty tree holds none); the +1 folds into the
  // address arithmetic. Node indices, so priorities and shapes, are those of an array without it.
  Node& n(int i) { return nodes_.data()[static_cast<std::ptrdiff_t>(i) + 1]; }
  const Node& n(int i) const { return nodes_.data()[static_cast<std::ptrdiff_t>(i) + 1]; }
  // Below every maxpre and running sum (they lie within +-(kMaxPoolGpus + 2 kMaxQuantity), engine.cpp), and
  // added to one in 64 bits (pull, resum) without overflow.
  static constexpr std::int32_t kNoMaxpre = std::numeric_limits<std::int32_t>::min();

  // Node i's own change: its sum less its children's (while its sum is that of its present children).
  std::int32_t delta_of(int i) const {
    const Node& x = n(i);
    return x.sum - n(x.l).sum - n(x.r).sum;
  }

  // sum = left sum + delta + right sum; maxpre = the largest of the left's maxpre, the running sum at this
  // node (left sum + delta) and that plus the right's maxpre (a missing child is the sentinel: sum 0, a maxpre
  // below every other). Stored in 32 bits: every result is a running sum or the difference of two, inside the
  // bounds above; the maxima are taken in 64 (the sentinel's maxpre added to a running sum), by two std::max
  // (GCC left the initializer_list form out of line in add(), a call a node: plain +1.2 %). Inlined into
  // split and merge (always_inline), as before.
  [[gnu::always_inline]] void pull(int i, std::int32_t delta) {
    Node& x = n(i);
    const Node& l = n(x.l);
    const Node& r = n(x.r);
    const std::int64_t here = std::int64_t{l.sum} + delta;
    x.sum = narrow(here + r.sum);
    x.maxpre = narrow(std::max(std::max<std::int64_t>(l.maxpre, here), here + r.maxpre));
  }

  // Node i's sum set to `sum` (its delta unchanged, a change below it of sum - the old sum), maxpre with it:
  // the running sum at the node is its sum less its right child's. Inlined into bump's path (always_inline):
  // GCC kept the pull it replaces out of line, a call per node of the path.
  [[gnu::always_inline]] void resum(int i, std::int32_t sum) {
    Node& x = n(i);
    const Node& r = n(x.r);
    x.sum = sum;
    const std::int64_t here = std::int64_t{sum} - r.sum;
    x.maxpre = narrow(std::max(std::max<std::int64_t>(n(x.l).maxpre, here), here + r.maxpre));
  }

  int make(std::int64_t key, std::int64_t delta) {
    int i;
    if (free_ >= 0) {
      i = free_;
      free_ = n(i).l;
    } else {
      if (nodes_.size() == nodes_.capacity()) grow();
      i = static_cast<int>(nodes_.size()) - 1;  // after the sentinel
      nodes_.emplace_back();
    }
    n(i) = Node{key, narrow(delta), narrow(delta), -1, -1};
    return i;
  }

  // The nodes' room grown by a quarter into the whole of its size class (size_class.hpp), not doubled: a pool's
  // tree is a few dozen nodes, and doubling left it a quarter empty on average. Out of line, so that make()
  // still inlines into bump(). The first makes the sentinel (see n()).
  [[gnu::noinline]] void grow() {
    if (nodes_.empty()) {
      nodes_.reserve(room_in_class(2, sizeof(Node)));
      nodes_.push_back(Node{0, 0, kNoMaxpre, -1, -1});
      return;
    }
    nodes_.reserve(room_in_class(nodes_.size() + nodes_.size() / 4 + 1, sizeof(Node)));
  }

  void free_node(int i) {
    n(i).l = free_;
    free_ = i;
  }

  void release(int i) {
    if (i < 0) return;
    release(n(i).l);
    release(n(i).r);
    free_node(i);
  }

  // left: keys <= key; right: keys > key.
  void split(int t, std::int64_t key, int& left, int& right) {
    if (t < 0) {
      left = right = -1;
      return;
    }
    const std::int32_t d = delta_of(t);
    if (n(t).key <= key) {
      split(n(t).r, key, n(t).r, right);
      left = t;
    } else {
      split(n(t).l, key, left, n(t).l);
      right = t;
    }
    pull(t, d);
  }

  int merge(int a, int b) {
    if (a < 0) return b;
    if (b < 0) return a;
    if (prio(a) > prio(b)) {
      const std::int32_t d = delta_of(a);
      n(a).r = merge(n(a).r, b);
      pull(a, d);
      return a;
    }
    const std::int32_t d = delta_of(b);
    n(b).l = merge(a, n(b).l);
    pull(b, d);
    return b;
  }

  // Adds `d` to the change at `key` (creating or dropping its node). One descent along the search path
  // (recorded): an existing node is updated there, and every node of the path above gains d in its sum (resum,
  // bottom-up); a new one is insert()'s. Inlined twice into add() (always_inline), whose two calls of it cost
  // ~25 instructions an add in the plain bench, where nearly every change exists already; the insert, most of
  // the realistic bench's, stays out of line.
  [[gnu::always_inline]] void bump(std::int64_t key, std::int64_t d) {
    int path[kMaxDepth];
    int depth = 0;
    int t = root_;
    if (t >= 0) {
      n(-1).key = key;  // the descent stops at the sentinel (see n()) when no node holds `key`
      while (n(t).key != key) {
        if (depth == kMaxDepth) return bump_slow(key, d);
        path[depth++] = t;
        t = key < n(t).key ? n(t).l : n(t).r;
      }
    }
    // Every node above the change gains d in its sum (in 32 bits: d is the difference of two running sums).
    const std::int32_t d32 = narrow(d);
    if (t < 0) return insert(path, depth, key, d32);
    // Found: update it (a change that drops to 0 leaves, its children merged in its place).
    Node& x = n(t);
    if (delta_of(t) + d32 == 0) {
      int& ref = depth == 0 ? root_ : (key < n(path[depth - 1]).key ? n(path[depth - 1]).l : n(path[depth - 1]).r);
      ref = merge(x.l, x.r);
      free_node(t);
    } else {
      resum(t, x.sum + d32);
    }
    for (int i = depth - 1; i >= 0; --i) resum(path[i], n(path[i]).sum + d32);
  }

  // bump()'s new change `d` at `key`, which no node holds (`path`: the search path, `depth` nodes from the root).
  // The new node goes where its priority places it (the treap insert), taking the subtree there, split at `key`,
  // as its children; the path above it gains d in its sums.
  [[gnu::noinline]] void insert(const int* path, int depth, std::int64_t key, std::int32_t d) {
    const int fresh = make(key, d);
    const std::uint32_t p = prio(fresh);
    // The first node of the path the new node outranks (merge() puts the higher priority above). The path's
    // priorities fall from the root down (the heap order every insert, merge and split keeps), so the nodes it
    // outranks are the path's last few: counted from the bottom, a step or two for a new node's random
    // priority, where the count from the top computed prio() for most of the path.
    int at = depth;
    while (at > 0 && prio(path[at - 1]) < p) --at;
    // The split of the subtree at `at`, as split() would (the same nodes, the same shape), from the path
    // already walked, bottom-up: its search path is the path's rest. A node before `key` goes left with its
    // left subtree, its right child the left part of the split below it; a node after `key` goes right, the
    // mirror. Each node's delta is read before its child on the path changes (delta_of), then pulled over it.
    int left = -1;
    int right = -1;
    std::int32_t dx = at < depth ? delta_of(path[depth - 1]) : 0;
    for (int i = depth - 1; i >= at; --i) {
      const int x = path[i];
      const std::int32_t above = i > at ? delta_of(path[i - 1]) : 0;
      if (n(x).key < key) {
        n(x).r = left;
        left = x;
      } else {
        n(x).l = right;
        right = x;
      }
      pull(x, dx);
      dx = above;
    }
    n(fresh).l = left;
    n(fresh).r = right;
    pull(fresh, d);
    (at == 0 ? root_ : (key < n(path[at - 1]).key ? n(path[at - 1]).l : n(path[at - 1]).r)) = fresh;
    for (int i = at - 1; i >= 0; --i) resum(path[i], n(path[i]).sum + d);
  }

  // One change before `t` and none at it (often the node the last trim left; `first` the leftmost node, `parent`
  // its parent or -1): the value from `t` on is that change's, so the node moves to `t` in place (its key stays
  // below the next one; every running sum, so every sum and maxpre, is unchanged): no split, release and merge
  // (~800 instructions a trim in the realistic bench). False (nothing changed) otherwise.
  bool move_first(int first, int parent, Seconds t) {
    int next = n(first).r;  // first's successor: the leftmost node of its right subtree, else its parent
    if (next >= 0) {
      while (n(next).l >= 0) next = n(next).l;
    } else {
      next = parent;
    }
    if (next >= 0 && n(next).key <= t.value) return false;
    n(first).key = t.value;
    return true;
  }

  // trim_before's case of two or more changes at or before `t` (out of line: most trims find none). While the
  // leftmost is a leaf whose parent, the next change, is at or before `t` (e.g. the last trim's node and the
  // start of an ask placed since), the leaf's change joins the parent's: the running sums from the parent on
  // do not see it, the parent's subtree sum is unchanged, and the spine's maxpre (which counted the leaf's
  // running sum) is taken again from the parent up; a parent whose change becomes 0 leaves, its right child in
  // its place. Then move_first, or else (a leftmost with a right child) the split.
  [[gnu::noinline]] void trim_folding(Seconds t) {
    int spine[kMaxDepth];  // the left spine, root down to the leftmost node (spine[depth - 1])
    int depth = 0;
    for (int i = root_; i >= 0; i = n(i).l) {
      if (depth == kMaxDepth) return trim_by_split(t);
      spine[depth++] = i;
    }
    for (;;) {
      const int first = spine[depth - 1];
      const int parent = depth > 1 ? spine[depth - 2] : -1;
      if (parent < 0 || n(first).r >= 0 || n(parent).key > t.value) break;
      const std::int32_t d = delta_of(parent) + n(first).sum;  // a leaf's sum is its change
      n(parent).l = -1;
      free_node(first);
      --depth;
      if (d != 0) {
        pull(parent, d);
        for (int j = depth - 2; j >= 0; --j) resum(spine[j], n(spine[j]).sum);
        continue;
      }
      const int r = n(parent).r;
      free_node(parent);
      --depth;
      (depth == 0 ? root_ : n(spine[depth - 1]).l) = r;
      const int above = depth;
      bool deep = false;
      for (int i = r; i >= 0 && !deep; i = n(i).l) {
        if (depth == kMaxDepth) {
          deep = true;
        } else {
          spine[depth++] = i;
        }
      }
      for (int j = above - 1; j >= 0; --j) resum(spine[j], n(spine[j]).sum);
      if (deep) return trim_by_split(t);
      if (depth == 0 || n(spine[depth - 1]).key >= t.value) return;  // the changes before `t` summed to 0
    }
    const int first = spine[depth - 1];
    if (!move_first(first, depth > 1 ? spine[depth - 2] : -1, t)) trim_by_split(t);
  }

  // trim_before's general case: the changes at or before `t` split off and replaced by one at `t`.
  void trim_by_split(Seconds t) {
    int left = -1;
    int right = -1;
    split(root_, t.value, left, right);  // left: keys <= t
    const std::int64_t s = left < 0 ? 0 : n(left).sum;
    release(left);
    if (s != 0) right = merge(make(t.value, s), right);
    root_ = right;
  }

  void bump_slow(std::int64_t key, std::int64_t d) {
    if (bump_existing(root_, key, d)) return;
    int a = -1;
    int b = -1;
    split(root_, key, a, b);
    root_ = merge(merge(a, make(key, d)), b);
  }

  static constexpr int kMaxDepth = 128;

  // Finds `key` on its search path; adds `d` there and to the sums of the path (resum). A change that becomes 0 is
  // removed (merging its children in its place). False when `key` has no node.
  bool bump_existing(int& t, std::int64_t key, std::int64_t d) {
    if (t < 0) return false;
    Node& x = n(t);
    if (key == x.key) {
      if (delta_of(t) + narrow(d) == 0) {
        const int gone = t;
        t = merge(x.l, x.r);
        free_node(gone);
      } else {
        resum(t, x.sum + narrow(d));
      }
      return true;
    }
    int& child = key < x.key ? n(t).l : n(t).r;
    if (!bump_existing(child, key, d)) return false;
    resum(t, n(t).sum + narrow(d));
    return true;
  }

  std::int64_t sum_upto(std::int64_t key) const {
    std::int64_t s = 0;
    for (int t = root_; t >= 0;) {
      const Node& x = n(t);
      if (x.key <= key) {
        s += std::int64_t{x.sum} - n(x.r).sum;  // the left's sum and x's delta
        t = x.r;
      } else {
        t = x.l;
      }
    }
    return s;
  }

  // Over the changes with from < key < to, in key order: `run` is the running sum before the subtree
  // (of everything earlier in key order); raises `best` to the largest running sum at such a change.
  // lo_ok / hi_ok: the whole subtree is already known to be above `from` / below `to`.
  void max_between(int t, std::int64_t from, std::int64_t to, std::int64_t& run, std::int64_t& best, bool lo_ok,
                   bool hi_ok) const {
    if (t < 0) return;
    const Node& x = n(t);
    if (lo_ok && hi_ok) {
      best = std::max(best, run + x.maxpre);
      run += x.sum;
      return;
    }
    if (x.key <= from) {  // x and its left subtree are at or before `from`: already in run
      max_between(x.r, from, to, run, best, lo_ok, hi_ok);
      return;
    }
    if (x.key >= to) {  // x and its right subtree are at or after `to`
      max_between(x.l, from, to, run, best, lo_ok, hi_ok);
      return;
    }
    max_between(x.l, from, to, run, best, lo_ok, true);
    run += delta_of(t);
    best = std::max(best, run);
    max_between(x.r, from, to, run, best, true, hi_ok);
  }

  void collect(int t, std::vector<std::pair<std::int64_t, std::int64_t>>& out) const {
    if (t < 0) return;
    collect(n(t).l, out);
    out.emplace_back(n(t).key, delta_of(t));
    collect(n(t).r, out);
  }

  std::vector<Node> nodes_;
  // The last node freed (-1: none), each free node's l the one freed before it: make() takes them back last
  // first, as a stack. Chained through the nodes, not a vector of their indices: no array a tree (its first
  // push allocated) and no call a push.
  int free_{-1};
  int root_{-1};
};

}  // namespace gpuex::matching
