// API keys: 256-bit random secrets, stored as SHA-256, checked in constant time, with scopes.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "server/principal.hpp"
#include "server/store/connection.hpp"
#include "server/store/query_pool.hpp"

namespace gpuex {

using KeyHash = std::array<unsigned char, 32>;

// A new key: "gpx_" + id (k_ + 16 hex) + "_" + 64 hex of secret. The id is public; the whole string
// is the secret the client sends.
struct NewKey {
  std::string id;
  std::string key;
  KeyHash hash;
};
NewKey generate_key();
KeyHash hash_key(std::string_view key);
// The id inside a key string, if it has the right shape.
std::optional<std::string> key_id_of(std::string_view key);

// Creates an account with one key, in one transaction; returns (account id, key).
std::pair<std::int64_t, NewKey> create_account(store::PgConnection& db, std::string_view name, Scopes scopes);
// The same inside the caller's transaction.
std::pair<std::int64_t, NewKey> insert_account(store::PgConnection& db, std::string_view name, Scopes scopes);
NewKey create_key(store::PgConnection& db, std::int64_t account_id, Scopes scopes);
// Revokes a key (again: a no-op keeping the first time); nullopt if there is no such key. Every running
// gpuexd hears of it (migrations/0013) and refuses the key from then on.
struct RevokedKey {
  std::string account_id;
  std::string revoked_at;  // RFC 3339 UTC
};
std::optional<RevokedKey> revoke_key(store::PgConnection& db, const std::string& key_id);
// The channel of those announcements (LISTEN), each carrying the key's id.
inline constexpr const char* kKeyRevokedChannel = "gpuex_key_revoked";

// Checks bearer keys. Known keys are cached in memory; a key not in the cache is looked up in
// PostgreSQL once (keys created by `gpuexd admin` while the server runs). Revocation through this
// server takes effect at once.
class KeyStore {
 public:
  explicit KeyStore(store::QueryPool& queries) : queries_(queries) {}

  // throttled: `before_lookup` refused the store lookup (and answered the client itself).
  enum class Outcome { ok, unknown, store_unavailable, throttled };
  // Calls `done` exactly once, possibly on another thread. A key not cached is looked up in the store
  // only if `before_lookup` (when given) allows it: a flood of made-up keys is throttled before it
  // reaches PostgreSQL.
  void authenticate(std::string_view key, std::function<void(Outcome, Principal)> done,
                    const std::function<bool()>& before_lookup = {});

  // Forget a key now (after it was revoked in the database).
  void revoke(const std::string& key_id);
  // Revokes every cached key the database says is revoked: for revocations this server may not have
  // heard of (announced while its listening connection was down).
  void recheck(store::PgConnection& db);
  // Whether this server revoked the key (WebSocket connections it authenticated close then).
  bool revoked(const std::string& key_id);

 private:
  struct Entry {
    KeyHash hash;
    Principal principal;
    bool revoked = false;
  };
  static bool matches(const Entry& entry, const KeyHash& hash);

  store::QueryPool& queries_;
  // Read-mostly: every request reads it (shared), a revocation or a key looked up in the store writes.
  std::shared_mutex mutex_;
  std::unordered_map<std::string, Entry> cache_;
};

}  // namespace gpuex
