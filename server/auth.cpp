// See auth.hpp.
#include "server/auth.hpp"

#include "server/sha256.hpp"

#include <openssl/crypto.h>
#include <openssl/rand.h>

#include <stdexcept>

namespace gpuex {
namespace {

constexpr const char* kInsertAccount = "INSERT INTO accounts (name) VALUES ($1) RETURNING id";
constexpr const char* kInsertKey =
    "INSERT INTO api_keys (id, account_id, key_sha256, scopes) VALUES ($1, $2::bigint, $3::bytea, $4::text[])";
constexpr const char* kSelectKey =
    "SELECT account_id, key_sha256, array_to_string(scopes, ','), revoked_at IS NOT NULL "
    "FROM api_keys WHERE id = $1";

constexpr std::string_view kKeyPrefix = "gpx_";
constexpr std::size_t kIdHex = 16;
constexpr std::size_t kSecretHex = 64;

bool is_hex(std::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string random_hex(std::size_t bytes) {
  std::array<unsigned char, 64> buf{};
  if (bytes > buf.size() || RAND_bytes(buf.data(), static_cast<int>(bytes)) != 1) {
    throw std::runtime_error("the system's random generator failed");
  }
  return to_hex(buf.data(), bytes);
}

std::string to_bytea(const KeyHash& hash) { return "\\x" + to_hex(hash.data(), hash.size()); }

std::optional<KeyHash> from_bytea(std::string_view text) {
  if (text.size() != 2 + 64 || text.substr(0, 2) != "\\x") return std::nullopt;
  KeyHash out{};
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<unsigned char>(nibble(text[2 + 2 * i]) * 16 + nibble(text[3 + 2 * i]));
  }
  return out;
}

std::string pg_array(Scopes scopes) { return "{" + scopes_to_string(scopes) + "}"; }

}  // namespace

std::optional<Scopes> parse_scopes(std::string_view list) {
  Scopes out = 0;
  while (!list.empty()) {
    auto comma = list.find(',');
    auto word = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    if (word == "read") out |= static_cast<Scopes>(Scope::read);
    else if (word == "trade") out |= static_cast<Scopes>(Scope::trade);
    else if (word == "provide") out |= static_cast<Scopes>(Scope::provide);
    else if (word == "admin") out |= static_cast<Scopes>(Scope::admin);
    else return std::nullopt;
  }
  if (out == 0) return std::nullopt;
  return out;
}

std::string scopes_to_string(Scopes scopes) {
  std::string out;
  for (auto [scope, name] : {std::pair{Scope::read, "read"}, {Scope::trade, "trade"},
                             {Scope::provide, "provide"}, {Scope::admin, "admin"}}) {
    if (has_scope(scopes, scope)) out += (out.empty() ? "" : ",") + std::string(name);
  }
  return out;
}

KeyHash hash_key(std::string_view key) { return sha256(key); }

NewKey generate_key() {
  NewKey k;
  k.id = "k_" + random_hex(kIdHex / 2);
  k.key = std::string(kKeyPrefix) + k.id + "_" + random_hex(kSecretHex / 2);
  k.hash = hash_key(k.key);
  return k;
}

std::optional<std::string> key_id_of(std::string_view key) {
  // gpx_ k_ <16 hex> _ <64 hex>
  if (key.size() != kKeyPrefix.size() + 2 + kIdHex + 1 + kSecretHex) return std::nullopt;
  if (key.substr(0, kKeyPrefix.size()) != kKeyPrefix) return std::nullopt;
  auto id = key.substr(kKeyPrefix.size(), 2 + kIdHex);
  if (id.substr(0, 2) != "k_" || !is_hex(id.substr(2)) || key[kKeyPrefix.size() + 2 + kIdHex] != '_' ||
      !is_hex(key.substr(key.size() - kSecretHex))) {
    return std::nullopt;
  }
  return std::string(id);
}

NewKey create_key(store::PgConnection& db, std::int64_t account_id, Scopes scopes) {
  NewKey k = generate_key();
  db.exec(kInsertKey, {k.id, std::to_string(account_id), to_bytea(k.hash), pg_array(scopes)});
  return k;
}

std::optional<RevokedKey> revoke_key(store::PgConnection& db, const std::string& key_id) {
  auto row = db.exec(
      "UPDATE api_keys SET revoked_at = coalesce(revoked_at, now()) WHERE id = $1 "
      "RETURNING account_id, to_char(revoked_at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"')",
      {key_id});
  if (row.rows() == 0) return std::nullopt;
  return RevokedKey{std::string(row.text(0, 0)), std::string(row.text(0, 1))};
}

std::pair<std::int64_t, NewKey> insert_account(store::PgConnection& db, std::string_view name, Scopes scopes) {
  auto id = db.exec(kInsertAccount, {std::string(name)}).integer(0, 0);
  return {id, create_key(db, id, scopes)};
}

std::pair<std::int64_t, NewKey> create_account(store::PgConnection& db, std::string_view name, Scopes scopes) {
  db.exec_script("BEGIN");
  try {
    auto created = insert_account(db, name, scopes);
    db.exec_script("COMMIT");
    return created;
  } catch (...) {
    if (db.healthy()) db.exec_script("ROLLBACK");
    throw;
  }
}

bool KeyStore::matches(const Entry& entry, const KeyHash& hash) {
  return !entry.revoked && CRYPTO_memcmp(entry.hash.data(), hash.data(), hash.size()) == 0;
}

void KeyStore::authenticate(std::string_view key, std::function<void(Outcome, Principal)> done,
                            const std::function<bool()>& before_lookup) {
  auto id = key_id_of(key);
  if (!id) return done(Outcome::unknown, {});
  KeyHash hash = hash_key(key);
  // A cached key is checked under a shared lock (the I/O threads do not wait for each other) and `done`
  // runs after it is released: it handles the whole request.
  std::optional<Principal> cached;
  bool known = false;
  {
    std::shared_lock lock(mutex_);
    auto it = cache_.find(*id);
    if (it != cache_.end()) {
      known = true;
      if (matches(it->second, hash)) cached = it->second.principal;
    }
  }
  if (cached) return done(Outcome::ok, std::move(*cached));
  if (known) return done(Outcome::unknown, {});
  if (before_lookup && !before_lookup()) return done(Outcome::throttled, {});
  queries_.submit(
      [this, id = *id, hash, done](store::PgConnection& db) {
        auto row = db.exec(kSelectKey, {id});
        if (row.rows() == 0) return done(Outcome::unknown, {});
        auto stored = from_bytea(row.text(0, 1));
        auto scopes = parse_scopes(row.text(0, 2));
        if (!stored || !scopes) return done(Outcome::unknown, {});
        Entry entry{*stored, Principal{row.integer(0, 0), id, *scopes}, row.text(0, 3) == "t"};
        {
          // A revocation that raced with this lookup wins: its tombstone stays.
          std::lock_guard lock(mutex_);
          auto [it, inserted] = cache_.try_emplace(id, entry);
          if (!inserted && !it->second.revoked) it->second = entry;
          entry = it->second;
        }
        bool ok = matches(entry, hash);
        done(ok ? Outcome::ok : Outcome::unknown, ok ? entry.principal : Principal{});
      },
      [done](const std::string&) { done(Outcome::store_unavailable, {}); });
}

void KeyStore::revoke(const std::string& key_id) {
  std::lock_guard lock(mutex_);
  cache_[key_id].revoked = true;  // a tombstone if it was not cached
}

void KeyStore::recheck(store::PgConnection& db) {
  std::string ids;  // a text[] literal; ids are k_ and hex digits
  {
    std::shared_lock lock(mutex_);
    for (const auto& [id, entry] : cache_) {
      if (!entry.revoked) ids += (ids.empty() ? "" : ",") + id;
    }
  }
  if (ids.empty()) return;
  auto rows = db.exec("SELECT id FROM api_keys WHERE id = ANY($1::text[]) AND revoked_at IS NOT NULL", {"{" + ids + "}"});
  for (int i = 0; i < rows.rows(); ++i) revoke(std::string(rows.text(i, 0)));
}

bool KeyStore::revoked(const std::string& key_id) {
  std::shared_lock lock(mutex_);
  auto it = cache_.find(key_id);
  return it != cache_.end() && it->second.revoked;
}

}  // namespace gpuex
