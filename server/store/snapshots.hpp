// Engine snapshots as the store keeps them: the whole EngineState as JSON text, so that recovery can
// start from the latest snapshot and replay only the commands logged after it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "matching/engine.hpp"
#include "server/store/connection.hpp"

namespace gpuex::store {

inline constexpr int kSnapshotFormat = 3;  // bump when the form below changes; older ones are skipped

std::string snapshot_json(const matching::EngineState& state);
// Throws StoreError when the text is not a snapshot of kSnapshotFormat.
matching::EngineState snapshot_from_json(std::string_view text);

struct StoredSnapshot {
  matching::Seq seq = 0;
  int format = 0;
  std::string digest;  // 16 hex digits
};

// Writes a snapshot in its own transaction and drops all but the latest `keep`.
void save_snapshot(PgConnection& db, const matching::EngineState& state, std::uint64_t digest, int keep = 2);
// The stored snapshots, newest first, without their state (fetched one at a time: each can be 100 MB).
std::vector<StoredSnapshot> list_snapshots(PgConnection& db);
// The one-row result whose column 0 is the JSON state of the snapshot of `seq` (read it in place: it can
// be 100 MB).
PgResult snapshot_state(PgConnection& db, matching::Seq seq);

}  // namespace gpuex::store
