// Engine snapshots as the store keeps them: the JSON form reads back into an equal state with the same
// digest, for states reached by random sequences of every command; damaged text is refused.
#include <catch2/catch.hpp>

#include <optional>
#include <string>
#include <variant>

#include "matching/random_commands.hpp"
#include "server/store/connection.hpp"
#include "server/store/snapshots.hpp"

using namespace gpuex;
using namespace gpuex::matching;
using gpuex::matching::test::RandomCommands;

namespace {
constexpr std::int64_t kStart = 1'800'000'000;  // 2027-01-15
}

TEST_CASE("an engine snapshot's JSON reads back into an equal state with the same digest", "[snapshots]") {
  std::size_t orders = 0, leases = 0, sells_with_history = 0, split_leases = 0;
  // Seeds 15-22 also play spot-lease lifecycles: leases split off by preemptions, asks re-priced after they sold
  // (a lease's ask terms kept apart from its own), which the plain sequences rarely reach. (Eight of them since
  // the lifecycles' other commands — twists, shared pools — take steps from their preemptions: four held 4 split-off
  // leases at their snapshots.)
  for (std::uint64_t seed : {11ULL, 12ULL, 13ULL, 14ULL, 15ULL, 16ULL, 17ULL, 18ULL, 19ULL, 20ULL, 21ULL, 22ULL}) {
    Engine engine(RandomCommands::config());
    RandomCommands gen(seed, kStart);
    gen.only_wire_valid();  // as the server feeds it: malformed orders never reach a stored state
    const bool lifecycles = seed >= 15;
    if (lifecycles) gen.play_lifecycles();
    for (int i = 1; i <= (lifecycles ? 1'200 : 600); ++i) {
      EventSink events;
      engine.apply(gen.next(), events);
      gen.observe(events);
      if (i % (lifecycles ? 25 : 150) != 0) continue;  // a split-off lease lives through a notice or two: look often
      INFO("seed " << seed << ", command " << i);
      const EngineState state = engine.snapshot();
      const std::string text = store::snapshot_json(state);
      const EngineState back = store::snapshot_from_json(text);
      REQUIRE(back == state);
      CHECK(Engine::digest(back) == engine.digest());
      CHECK(Engine::restore(RandomCommands::config(), back).digest() == engine.digest());
      orders += state.open_orders.size();
      leases += state.leases.size();
      for (const Order& o : state.open_orders) sells_with_history += o.is_sell() && o.free.pieces().size() > 1;
      for (const Lease& l : state.leases) split_leases += l.split_from.value != 0;
    }
  }
  // The states were not trivial: open orders, leases and sells whose free capacity has several pieces.
  CHECK(orders > 100);
  CHECK(leases > 10);
  CHECK(sells_with_history > 5);
  CHECK(split_leases > 4);  // and leases split off by preemptions (counted at each snapshot that holds one)
}

TEST_CASE("a damaged or foreign snapshot is refused with a reason", "[snapshots]") {
  Engine engine(RandomCommands::config());
  RandomCommands gen(5, kStart);
  gen.only_wire_valid();
  for (int i = 0; i < 200; ++i) {
    EventSink events;
    engine.apply(gen.next(), events);
    gen.observe(events);
  }
  const std::string text = store::snapshot_json(engine.snapshot());
  auto refused = [](const std::string& t) {
    try {
      store::snapshot_from_json(t);
    } catch (const store::StoreError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(refused(text.substr(0, text.size() / 2)), Catch::Contains("not a JSON object"));
  std::string other_format = text;
  const std::string format = "\"format\":" + std::to_string(store::kSnapshotFormat);
  other_format.replace(other_format.find(format), format.size(), "\"format\":9");
  CHECK_THAT(refused(other_format), Catch::Contains("format 9"));
  std::string no_orders = text;
  no_orders.replace(no_orders.find("\"open_orders\""), 13, "\"open_ordersX\"");
  CHECK_THAT(refused(no_orders), Catch::Contains("'open_orders' is missing"));
  std::string bad_status = text;
  auto at = bad_status.find("\"status\":");
  REQUIRE(at != std::string::npos);
  bad_status.replace(at, 10, "\"status\":9");
  CHECK_THAT(refused(bad_status), Catch::Contains("'status' is out of range"));
}

TEST_CASE("an engine restored from a snapshot's JSON answers the rest of a command stream as the original did",
          "[snapshots]") {
  // Repeats of client_order_ids (duplicates and conflicts) are in the stream: an order that ended shortly
  // before the snapshot must still be answered as a duplicate after it, as the original engine does.
  std::size_t duplicates_after = 0;
  // Seeds 27-30 also play spot-lease lifecycles (restored in the middle of preemptions and their notices).
  for (std::uint64_t seed : {21ULL, 22ULL, 23ULL, 24ULL, 25ULL, 26ULL, 27ULL, 28ULL, 29ULL, 30ULL}) {
    INFO("seed " << seed);
    Engine original(RandomCommands::config());
    RandomCommands gen(seed, kStart);
    gen.only_wire_valid();  // as the server feeds it: malformed orders never reach a stored state
    if (seed >= 27) gen.play_lifecycles();
    std::optional<Engine> restored;
    for (int i = 1; i <= 800; ++i) {
      const Command cmd = gen.next();
      EventSink events;
      original.apply(cmd, events);
      gen.observe(events);
      if (restored) {
        EventSink again;
        restored->apply(cmd, again);
        INFO("command " << i << ", seq " << cmd.seq);
        REQUIRE(again == events);
        for (const Event& e : events) duplicates_after += std::holds_alternative<OrderDuplicate>(e);
      }
      if (i == 400) {
        restored.emplace(Engine::restore(RandomCommands::config(),
                                         store::snapshot_from_json(store::snapshot_json(original.snapshot()))));
      }
    }
    CHECK(restored->digest() == original.digest());
  }
  CHECK(duplicates_after > 0);
}
