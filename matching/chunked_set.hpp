// A sorted set of small keys kept in contiguous chunks (a two-level B-tree): the engine's book sets.
//
// std::set costs a heap node per key (~100 bytes with the allocator's header for a 64-byte key) and a
// cache miss per step of a walk. Here keys sit in sorted chunks of at most kMax; finding a key binary-
// searches the chunks' last keys, then the chunk. Iteration is contiguous within a chunk.
//
// Unlike std::set, insert and erase invalidate every iterator of the set. Walks that change the set they
// walk keep the key their iterator was at and re-seek with lower_bound() after the change.
//
// A chunk's room follows the allocator's size classes (grown_room): most sets of the realistic bench are a few
// keys in one chunk (a fixed-window bid's cell, a tier of a free-run cell), where growing to 4, 8, 16... keys
// left a quarter of the room empty on average and the allocator rounded it up besides (a chunk of 65 40-byte
// keys, the most before kMax was 63, took a 3,072-byte block for 2,600 bytes).
//
// For the same reason a set of one chunk keeps it inline (one_), and only a set of two or more has an array of
// chunks (at data_): a lookup or a walk of a one-chunk set goes from the set to its keys, not through a header
// array's cache line first. The set points at its chunks either way (at one_, or at the array), so a walk reads
// where its chunks are and how many as it did from a vector of chunks; the set is 40 bytes (a pool's spot
// leases, LivePool's 512-byte node), its size counted, not kept.
//
// The array of a set of two or more chunks is followed, in the same block, by a directory: a copy of the last key
// of each chunk but the last. Finding a key's chunk binary-searches those copies, side by side, instead of reading
// each probed chunk's header and then its last key, a cache line of its own at each probe (the free-run index's
// updates spent about half their time there in the realistic bench's 1,000,000 commands). An insert never changes
// a directory entry (a key goes into the first chunk whose last key is not less than it, or into the last chunk,
// which has none); an erase of a chunk's last key, a replace of it, a split and a merge do.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "matching/size_class.hpp"

namespace gpuex::matching {

template <class Key, class Less, std::size_t MaxKeys = 63>
class ChunkedSet {
 public:
  // A chunk above this splits in two: at the default 63, a chunk at its most (kMax + 1 keys of 40 bytes, the
  // indexes' entries) fills a 2,560-byte size class, and its halves 1,280 bytes each. A set whose updates
  // outweigh its scans may take smaller chunks (MaxKeys): less to shift at an insert or erase, more chunks to
  // search.
  static constexpr std::size_t kMax = MaxKeys;
  // The directory holds copies, placed in raw memory and never destroyed.
  static_assert(std::is_trivially_copyable_v<Key> && alignof(Key) <= __STDCPP_DEFAULT_NEW_ALIGNMENT__);

  ChunkedSet() = default;
  ChunkedSet(ChunkedSet&& o) noexcept { take(o); }
  ChunkedSet& operator=(ChunkedSet&& o) noexcept {
    if (this != &o) {
      release();
      take(o);
    }
    return *this;
  }
  ChunkedSet(const ChunkedSet&) = delete;
  ChunkedSet& operator=(const ChunkedSet&) = delete;
  ~ChunkedSet() { release(); }

  class const_iterator {
   public:
    const_iterator() = default;
    const Key& operator*() const { return s_->data_[c_][i_]; }
    const Key* operator->() const { return &s_->data_[c_][i_]; }
    const_iterator& operator++() {
      if (++i_ == s_->data_[c_].size()) {
        ++c_;
        i_ = 0;
      }
      return *this;
    }
    bool operator==(const const_iterator& o) const { return c_ == o.c_ && i_ == o.i_; }
    // Its place: the chunk (in chunks()) and the key's index in it.
    std::size_t chunk() const { return c_; }
    std::size_t index() const { return i_; }

   private:
    friend class ChunkedSet;
    const_iterator(const ChunkedSet* s, std::size_t c, std::size_t i) : s_(s), c_(c), i_(i) {}
    const ChunkedSet* s_{nullptr};
    std::size_t c_{0};
    std::size_t i_{0};
  };

  const_iterator begin() const { return const_iterator(this, 0, 0); }
  const_iterator end() const { return const_iterator(this, count_, 0); }
  bool empty() const { return count_ == 0; }
  // Counted (the chunks' sizes): a set keeps no count of its keys, to stay 40 bytes (an update learns whether it
  // changed the set from insert's and erase's answers).
  std::size_t size() const {
    std::size_t n = 0;
    for (const std::vector<Key>& ch : chunks()) n += ch.size();
    return n;
  }
  // The keys chunk by chunk (each chunk non-empty and sorted, in order): for scans that want contiguous
  // memory without the iterator's per-key bounds check. Valid until the set changes.
  std::span<const std::vector<Key>> chunks() const { return {data_, count_}; }
  // Changes with every insert, erase or replace: an iterator taken at an equal version is still valid (it is
  // 32 bits: a walk would have to see 2^32 changes of one set to take an old iterator for a valid one).
  std::uint64_t version() const { return version_; }

  // The first key not less than k.
  const_iterator lower_bound(const Key& k) const {
    const std::size_t c = chunk_for(k);
    if (c == count_) return end();
    const auto& ch = data_[c];
    const auto it = std::lower_bound(ch.begin(), ch.end(), k, Less{});
    if (it == ch.end()) return end();  // after every key (only the last chunk's end: chunk_for)
    return const_iterator(this, c, static_cast<std::size_t>(it - ch.begin()));
  }

  std::size_t count(const Key& k) const {
    const const_iterator it = lower_bound(k);
    return it != end() && !Less{}(k, *it) ? 1 : 0;
  }

  // Inserts k unless an equivalent key is present; returns whether it did.
  bool insert(const Key& k) {
    ++version_;
    if (count_ == 0) {
      one_.assign(1, k);
      count_ = 1;
      return true;
    }
    const std::size_t c = chunk_for(k);
    auto& ch = data_[c];
    const auto it = std::lower_bound(ch.begin(), ch.end(), k, Less{});
    if (it != ch.end() && !Less{}(k, *it)) return false;
    if (ch.size() == ch.capacity()) {
      // Grow by a quarter, into the whole of the size class, never past kMax + 1 (the size at which a chunk
      // splits): a vector's own doubling left chunks of 33-64 keys in room for 128.
      const auto at = it - ch.begin();
      ch.reserve(grown_room(ch.size()));
      ch.insert(ch.begin() + at, k);
    } else {
      ch.insert(it, k);
    }
    if (ch.size() > kMax) split(c);
    return true;
  }

  // Overwrites the key equivalent to k with k (fields that do not take part in the order), if present.
  void replace(const Key& k) { replace(k, k); }

  // Overwrites the key equivalent to `was` with k, if present: k must sort where `was` does (no other key of the
  // set between them), so the chunks stay in order without an erase and an insert moving the keys after it.
  // Returns whether it was present.
  bool replace(const Key& was, const Key& k) {
    const auto [c, at] = find_equivalent(was);
    if (c == count_) return false;
    ++version_;
    data_[c][at] = k;
    if (at + 1 == data_[c].size() && c + 1 < count_) lasts()[c] = k;
    return true;
  }

  // Erases the key equivalent to k, if any; returns whether there was one.
  bool erase(const Key& k) {
    const auto [c, at] = find_equivalent(k);
    if (c == count_) return false;
    ++version_;
    auto& ch = data_[c];
    ch.erase(ch.begin() + static_cast<std::ptrdiff_t>(at));
    if (ch.empty()) {
      if (count_ == 1) {
        std::vector<Key>().swap(one_);  // its block freed, as an emptied chunk's
        count_ = 0;
      } else {
        regroup(c, 1, nullptr);
      }
    } else if (c + 1 < count_ && ch.size() + data_[c + 1].size() <= kMax / 2) {
      // Keep chunks from thinning out: merge with the next one while both are small.
      auto& next = data_[c + 1];
      ch.insert(ch.end(), next.begin(), next.end());
      regroup(c + 1, 1, nullptr);
    } else if (at == ch.size() && c + 1 < count_) {
      lasts()[c] = ch.back();  // the chunk's last key went
    }
    return true;
  }

 private:
  // Splits chunk c (kMax + 1 keys) in halves. Out of line, as grown_room.
  [[gnu::noinline]] void split(std::size_t c) {
    std::vector<Key>& ch = data_[c];
    const auto mid = ch.begin() + static_cast<std::ptrdiff_t>(ch.size() / 2);
    std::vector<Key> upper(mid, ch.end());
    ch.erase(mid, ch.end());
    ch.shrink_to_fit();
    regroup(c + 1, 0, &upper);
  }

  // The chunks with `drop` chunks (0 or 1, each empty or merged away) at `at` left out and *add, if any, put in
  // at `at`: into one_ when one chunk is left, else into a new block of exactly as many and their directory
  // (splits and merges are rare; a set keeps no array's room, to stay 40 bytes). The chunks that may have changed
  // are *add and the one before `at` (split, or merged into); the directory takes their last keys from them, and
  // the others' from the old directory, without loading their ends.
  [[gnu::noinline]] void regroup(std::size_t at, std::size_t drop, std::vector<Key>* add) {
    const std::size_t n = count_ - drop + (add ? 1 : 0);
    std::vector<Key>* const old = data_;
    const Key* const old_lasts = count_ > 1 ? lasts() : nullptr;
    if (n == 1) {
      one_ = std::move(old[at == 0 ? 1 : 0]);
      free_block(old, count_);
      data_ = &one_;
    } else {
      std::vector<Key>* const now = new_block(n);
      Key* const now_lasts = lasts_of(now, n);
      std::size_t j = 0;
      constexpr std::size_t kChanged = ~std::size_t{0};
      // Chunk j of the new block; `was`: its place in the old directory, if its last key is there unchanged.
      const auto put = [&](std::vector<Key>& ch, std::size_t was) {
        if (j + 1 < n) std::construct_at(now_lasts + j, was < count_ - 1 ? old_lasts[was] : ch.back());
        now[j++] = std::move(ch);
      };
      for (std::size_t i = 0; i < count_; ++i) {
        if (i == at && add) put(*add, kChanged);
        if (i == at && drop) continue;
        put(old[i], i + 1 == at ? kChanged : i);
      }
      if (at == count_ && add) put(*add, kChanged);
      if (old != &one_) free_block(old, count_);
      data_ = now;
    }
    count_ = static_cast<std::uint32_t>(n);
  }

  // A block of n chunks (empty vectors) with room after them for their directory (n - 1 keys), and its parts.
  static std::size_t lasts_offset(std::size_t n) {
    return (n * sizeof(std::vector<Key>) + alignof(Key) - 1) / alignof(Key) * alignof(Key);
  }
  static std::vector<Key>* new_block(std::size_t n) {
    auto* const d = static_cast<std::vector<Key>*>(::operator new(lasts_offset(n) + (n - 1) * sizeof(Key)));
    std::uninitialized_value_construct_n(d, n);
    return d;
  }
  static void free_block(std::vector<Key>* d, std::size_t n) {
    std::destroy_n(d, n);
    ::operator delete(static_cast<void*>(d));
  }
  static Key* lasts_of(std::vector<Key>* d, std::size_t n) {
    return std::launder(reinterpret_cast<Key*>(reinterpret_cast<std::byte*>(d) + lasts_offset(n)));
  }
  // The directory of a set of two or more chunks.
  Key* lasts() const { return lasts_of(data_, count_); }

  void take(ChunkedSet& o) noexcept {
    count_ = o.count_;
    version_ = o.version_;
    if (o.data_ == &o.one_) {
      one_ = std::move(o.one_);
      data_ = &one_;
    } else {
      std::vector<Key>().swap(one_);
      data_ = o.data_;
      o.data_ = &o.one_;
    }
    o.count_ = 0;
  }
  void release() {
    if (data_ != &one_) free_block(data_, count_);
    data_ = &one_;
  }

  // The room a full chunk of n keys grows to: n + n / 4 + 1 keys at least, and as many more as fit in the
  // allocator's size class of their bytes (size_class.hpp), at most kMax + 1. Out of line: a chunk grows
  // rarely, and insert() inlines into the index updates.
  [[gnu::noinline]] static std::size_t grown_room(std::size_t n) {
    const std::size_t want = std::min(kMax + 1, n + n / 4 + 1);
    return std::clamp(room_in_class(want, sizeof(Key)), want, kMax + 1);
  }

  // The first chunk whose last key is not less than k, else the last chunk (0 if there is none): the chunk
  // where k is or would go, found in the directory. A set of one chunk (most sets) has none and is searched
  // without loading its end, a cache miss of its own unless the search in the chunk comes near it.
  std::size_t chunk_for(const Key& k) const {
    if (count_ <= 1) return 0;
    const Key* const d = lasts();
    return static_cast<std::size_t>(
        std::partition_point(d, d + count_ - 1, [&](const Key& last) { return Less{}(last, k); }) - d);
  }

  // The chunk and the place in it of the key equivalent to k ({count_, 0} if none).
  std::pair<std::size_t, std::size_t> find_equivalent(const Key& k) const {
    const std::size_t c = chunk_for(k);
    if (c == count_) return {c, 0};
    const auto& ch = data_[c];
    const auto it = std::lower_bound(ch.begin(), ch.end(), k, Less{});
    if (it == ch.end() || Less{}(k, *it)) return {count_, 0};
    return {c, static_cast<std::size_t>(it - ch.begin())};
  }

  // The chunks, each non-empty and sorted, chunk i's keys < chunk i+1's, count_ of them at data_: a set of one
  // chunk has it in one_ (data_ == &one_), a set of two or more in an array of its own (and one_ empty,
  // without a block).
  std::vector<Key> one_;
  std::vector<Key>* data_{&one_};
  std::uint32_t count_{0};
  std::uint32_t version_{0};
};

}  // namespace gpuex::matching
