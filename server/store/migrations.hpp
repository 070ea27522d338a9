// Schema migrations: numbered SQL files embedded in gpuexd, applied in order, each exactly once.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "server/store/connection.hpp"

namespace gpuex::store {

struct Migration {
  int version;
  std::string_view name;  // e.g. "0001_markets"
  std::string_view sql;
};

// Every file of migrations/, in version order (generated at build time).
std::span<const Migration> embedded_migrations();

// The embedded migrations the database has not applied yet. Throws StoreError when an applied
// migration's checksum differs from the embedded file (someone edited a released migration).
std::vector<Migration> pending_migrations(PgConnection& conn);

// Applies the pending migrations, each in its own transaction, under an advisory lock so that two
// gpuexd processes never migrate at once. Returns the migrations it applied.
std::vector<Migration> apply_migrations(PgConnection& conn);

}  // namespace gpuex::store
