// Applies migrations/: see migrations.hpp.
#include "server/store/migrations.hpp"

#include "server/sha256.hpp"

#include <map>

namespace gpuex::store {
namespace {

constexpr const char* kCreateTable = R"sql(
CREATE TABLE IF NOT EXISTS schema_migrations (
  version    integer PRIMARY KEY,
  name       text NOT NULL,
  sha256     text NOT NULL,
  applied_at timestamptz NOT NULL DEFAULT now()
))sql";
constexpr const char* kSelectApplied = "SELECT version, sha256 FROM schema_migrations";
constexpr const char* kInsertApplied =
    "INSERT INTO schema_migrations (version, name, sha256) VALUES ($1::integer, $2, $3)";
constexpr const char* kTableExists = "SELECT to_regclass('schema_migrations') IS NOT NULL";
// Any constant shared by every gpuexd: the key of the migration advisory lock.
constexpr const char* kLock = "SELECT pg_advisory_lock(7474016)";
constexpr const char* kUnlock = "SELECT pg_advisory_unlock(7474016)";

std::map<int, std::string> applied_versions(PgConnection& conn) {
  std::map<int, std::string> applied;
  if (conn.exec(kTableExists).text(0, 0) != "t") return applied;
  auto res = conn.exec(kSelectApplied);
  for (int r = 0; r < res.rows(); ++r) {
    applied.emplace(static_cast<int>(res.integer(r, 0)), std::string(res.text(r, 1)));
  }
  return applied;
}

}  // namespace

std::vector<Migration> pending_migrations(PgConnection& conn) {
  auto applied = applied_versions(conn);
  std::vector<Migration> pending;
  for (const auto& m : embedded_migrations()) {
    auto it = applied.find(m.version);
    if (it == applied.end()) {
      pending.push_back(m);
    } else if (it->second != sha256_hex(m.sql)) {
      throw StoreError("migration " + std::string(m.name) +
                       " was changed after it was applied; add a new migration instead");
    }
  }
  return pending;
}

std::vector<Migration> apply_migrations(PgConnection& conn) {
  conn.exec(kLock);
  std::vector<Migration> done;
  try {
    conn.exec(kCreateTable);
    for (const auto& m : pending_migrations(conn)) {
      conn.exec_script("BEGIN");
      try {
        conn.exec_script(m.sql);
        conn.exec(kInsertApplied, {std::to_string(m.version), std::string(m.name), sha256_hex(m.sql)});
        conn.exec_script("COMMIT");
      } catch (const StoreError& e) {
        conn.exec_script("ROLLBACK");
        throw StoreError("migration " + std::string(m.name) + " failed: " + e.what());
      }
      done.push_back(m);
    }
  } catch (...) {
    if (conn.healthy()) conn.exec(kUnlock);
    throw;
  }
  conn.exec(kUnlock);
  return done;
}

}  // namespace gpuex::store
