// client_order_id: a repeat with the same body returns the original; a different body conflicts.
#include "fixture.hpp"

using namespace gpuex::matching;
using namespace gpuex::matching::test;

TEST_CASE("a repeat of an open order's client_order_id", "[idempotency]") {
  Fixture f;
  OrderRequest b = buy_duration(usd4(20000), 4, H);
  b.client_order_id = "abc";
  const OrderId id = f.place(kBuyer, b);
  f.place(kBuyer, b);
  REQUIRE(f.events().size() == 1);
  const auto dup = of_type<OrderDuplicate>(f.events());
  REQUIRE(dup.size() == 1);
  CHECK(dup[0].order.id == id);
  b.quantity = Qty(5);
  f.place(kBuyer, b);
  CHECK(of_type<CommandRejected>(f.events()).at(0).reason == Reason::idempotency_conflict);
  // Another account may use the same id.
  b.quantity = Qty(4);
  CHECK(f.status(f.place(kBuyer2, b)) == OrderStatus::open);
}

TEST_CASE("ended orders are remembered until the server says they are committed", "[idempotency]") {
  Fixture f;
  OrderRequest b = buy_duration(usd4(20000), 4, H);
  b.client_order_id = "ioc-1";
  b.time_in_force = TimeInForce::ioc;
  const OrderId id = f.place(kBuyer, b);
  CHECK(f.status(id) == OrderStatus::cancelled);
  f.place(kBuyer, b);
  REQUIRE(of_type<OrderDuplicate>(f.events()).size() == 1);
  CHECK(of_type<OrderDuplicate>(f.events())[0].order.status == OrderStatus::cancelled);
  f.engine().committed_through(id.value);
  f.place(kBuyer, b);  // the store answers repeats of committed ids; the engine no longer knows it
  CHECK(of_type<OrderAccepted>(f.events()).size() == 1);
}

TEST_CASE("engine rejects use up the client_order_id too", "[idempotency]") {
  Fixture f;
  OrderRequest b = buy_window(usd4(20000), 4, T0 - 10, T0 + H);
  b.client_order_id = "late";
  f.place(kBuyer, b);
  CHECK(of_type<OrderRejected>(f.events()).size() == 1);
  f.place(kBuyer, b);
  REQUIRE(of_type<OrderDuplicate>(f.events()).size() == 1);
  CHECK(of_type<OrderDuplicate>(f.events())[0].order.reason == Reason::window_in_past);
}
