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
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "matching/size_class.hpp"

namespace gpuex::matching {

template <class Key, class Less, std::size_t MaxKeys = 63>
class ChunkedSet {
 public:
  // A chunk above this splits in two: at the default 63, a chunk at its most (kMax + 1 keys of 40 bytes, the
  // indexes' entries) fills a 2,560-byte size class, and its halves 1,280 bytes each. A set whose updates outweigh its scans may
  // take smaller chunks (MaxKeys): less to shift at an insert or erase, more chunks to search.
  static constexpr std::size_t kMax = MaxKeys;

  class const_iterator {
   public:
    const_iterator() = default;
    const Key& operator*() const { return s_->chunks_[c_][i_]; }
    const Key* operator->() const { return &s_->chunks_[c_][i_]; }
    const_iterator& operator++() {
      if (++i_ == s_->chunks_[c_].size()) {
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
  const_iterator end() const { return const_iterator(this, chunks_.size(), 0); }
  bool empty() const { return size_ == 0; }
  std::size_t size() const { return size_; }
  // The keys chunk by chunk (each chunk non-empty and sorted, in order): for scans that want contiguous
  // memory without the iterator's per-key bounds check.
  const std::vector<std::vector<Key>>& chunks() const { return chunks_; }
  // Changes with every insert, erase or replace: an iterator taken at an equal version is still valid.
  std::uint64_t version() const { return version_; }

  // The first key not less than k.
  const_iterator lower_bound(const Key& k) const {
    const std::size_t c = chunk_for(k);
    if (c == chunks_.size()) return end();
    const auto& ch = chunks_[c];
    const auto it = std::lower_bound(ch.begin(), ch.end(), k, Less{});
    if (it == ch.end()) return end();  // after every key (only the last chunk's end: chunk_for)
    return const_iterator(this, c, static_cast<std::size_t>(it - ch.begin()));
  }

  std::size_t count(const Key& k) const {
    const const_iterator it = lower_bound(k);
    return it != end() && !Less{}(k, *it) ? 1 : 0;
  }

  // Inserts k unless an equivalent key is present.
  void insert(const Key& k) {
    ++version_;
    if (chunks_.empty()) {
      chunks_.emplace_back(1, k);
      size_ = 1;
      return;
    }
    const std::size_t c = chunk_for(k);
    auto& ch = chunks_[c];
    const auto it = std::lower_bound(ch.begin(), ch.end(), k, Less{});
    if (it != ch.end() && !Less{}(k, *it)) return;
    if (ch.size() == ch.capacity()) {
      // Grow by a quarter, into the whole of the size class, never past kMax + 1 (the size at which a chunk
      // splits): a vector's own doubling left chunks of 33-64 keys in room for 128.
      const auto at = it - ch.begin();
      ch.reserve(grown_room(ch.size()));
      ch.insert(ch.begin() + at, k);
    } else {
      ch.insert(it, k);
    }
    ++size_;
    if (ch.size() > kMax) {
      const auto mid = ch.begin() + static_cast<std::ptrdiff_t>(ch.size() / 2);
      std::vector<Key> upper(mid, ch.end());
      ch.erase(mid, ch.end());
      ch.shrink_to_fit();
      chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(c) + 1, std::move(upper));
    }
  }

  // Overwrites the key equivalent to k with k (fields that do not take part in the order), if present.
  void replace(const Key& k) { replace(k, k); }

  // Overwrites the key equivalent to `was` with k, if present: k must sort where `was` does (no other key of the
  // set between them), so the chunks stay in order without an erase and an insert moving the keys after it.
  // Returns whether it was present.
  bool replace(const Key& was, const Key& k) {
    const auto [c, at] = find_equivalent(was);
    if (c == chunks_.size()) return false;
    ++version_;
    chunks_[c][at] = k;
    return true;
  }

  // Erases the key equivalent to k, if any.
  void erase(const Key& k) {
    const auto [c, at] = find_equivalent(k);
    if (c == chunks_.size()) return;
    ++version_;
    auto& ch = chunks_[c];
    ch.erase(ch.begin() + static_cast<std::ptrdiff_t>(at));
    --size_;
    if (ch.empty()) {
      chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(c));
    } else if (c + 1 < chunks_.size() && ch.size() + chunks_[c + 1].size() <= kMax / 2) {
      // Keep chunks from thinning out: merge with the next one while both are small.
      auto& next = chunks_[c + 1];
      ch.insert(ch.end(), next.begin(), next.end());
      chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(c) + 1);
    }
  }

 private:
  // The room a full chunk of n keys grows to: n + n / 4 + 1 keys at least, and as many more as fit in the
  // allocator's size class of their bytes (size_class.hpp), at most kMax + 1. Out of line: a chunk grows
  // rarely, and insert() inlines into the index updates.
  [[gnu::noinline]] static std::size_t grown_room(std::size_t n) {
    const std::size_t want = std::min(kMax + 1, n + n / 4 + 1);
    return std::clamp(room_in_class(want, sizeof(Key)), want, kMax + 1);
  }

  // The first chunk whose last key is not less than k, else the last chunk (0 if there is none): the chunk
  // where k is or would go. The last chunk's last key is not read: a set of one chunk (most sets) is searched
  // without loading its end, a cache miss of its own unless the search in the chunk comes near it.
  std::size_t chunk_for(const Key& k) const {
    if (chunks_.empty()) return 0;
    const auto it = std::partition_point(chunks_.begin(), chunks_.end() - 1,
                                         [&](const std::vector<Key>& ch) { return Less{}(ch.back(), k); });
    return static_cast<std::size_t>(it - chunks_.begin());
  }

  // The chunk and the place in it of the key equivalent to k ({chunks_.size(), 0} if none).
  std::pair<std::size_t, std::size_t> find_equivalent(const Key& k) const {
    const std::size_t c = chunk_for(k);
    if (c == chunks_.size()) return {c, 0};
    const auto& ch = chunks_[c];
    const auto it = std::lower_bound(ch.begin(), ch.end(), k, Less{});
    if (it == ch.end() || Less{}(k, *it)) return {chunks_.size(), 0};
    return {c, static_cast<std::size_t>(it - ch.begin())};
  }

  std::vector<std::vector<Key>> chunks_;  // each non-empty and sorted; chunk i's keys < chunk i+1's
  std::size_t size_{0};
  std::uint64_t version_{0};
};

}  // namespace gpuex::matching
