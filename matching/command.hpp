// Commands: the only inputs of the engine. Each carries its sequence number and time.
#pragma once

#include <optional>
#include <string>
#include <variant>

#include "matching/green_policy.hpp"
#include "matching/limits.hpp"
#include "matching/order.hpp"
#include "matching/pool.hpp"
#include "matching/types.hpp"

namespace gpuex::matching {

// Registers a pool owned by the command's account; its id is the command's seq.
struct AddPool {
  PoolSpec spec;
  bool operator==(const AddPool&) const = default;
};

// Grows or shrinks a pool; never below what its asks and leases hold at any instant ahead (pool_busy).
struct ResizePool {
  PoolId pool;
  std::int32_t nodes{0};
  bool operator==(const ResizePool&) const = default;
};

// Retires a pool with no open ask and no lease holding GPUs (else pool_busy).
struct RetirePool {
  PoolId pool;
  bool operator==(const RetirePool&) const = default;
};

// Admin: verifies a pool's energy attributes until `expires_at`, or withdraws verification.
struct VerifyPool {
  PoolId pool;
  bool verified{false};
  Seconds expires_at;
  std::string evidence;
  bool operator==(const VerifyPool&) const = default;
};

// Places a buy or sell order for the command's account; its id is the command's seq.
struct PlaceOrder {
  OrderRequest order;
  bool operator==(const PlaceOrder&) const = default;
};

struct Cancel {
  OrderId order;
  bool operator==(const Cancel&) const = default;
};

// Cancels every open order of the command's account (in one market if given), in id order.
struct CancelAll {
  std::optional<MarketId> market;
  bool operator==(const CancelAll&) const = default;
};

// Lowers the quantity (keeps time priority) and/or sets a new price (loses it).
struct Amend {
  OrderId order;
  std::optional<Qty> quantity;
  std::optional<Price> price;
  bool operator==(const Amend&) const = default;
};

// The buyer ends a lease early; GPUs return to the pool.
struct ReleaseLease {
  LeaseId lease;
  bool operator==(const ReleaseLease&) const = default;
};

// Admin: halts (halted = true) or resumes a market.
struct HaltMarket {
  MarketId market;
  bool halted{true};
  bool operator==(const HaltMarket&) const = default;
};

// Admin: sets an account's exposure limits.
struct SetLimits {
  AccountId account;
  Limits limits;
  bool operator==(const SetLimits&) const = default;
};

// Admin: replaces the green policy; every pool is re-classified and its asks re-priced.
struct SetGreenPolicy {
  GreenPolicy policy;
  bool operator==(const SetGreenPolicy&) const = default;
};

// Only applies what time has done up to `now`.
struct Tick {
  bool operator==(const Tick&) const = default;
};

using CommandBody = std::variant<AddPool, ResizePool, RetirePool, VerifyPool, PlaceOrder, Cancel, CancelAll,
                                 Amend, ReleaseLease, HaltMarket, SetLimits, SetGreenPolicy, Tick>;

struct Command {
  Seq seq{0};        // strictly increasing (a Tick that changed nothing may reuse the next seq)
  Seconds now;       // never goes backwards; an earlier time is treated as the previous one
  AccountId account; // who sent it (admin commands: the admin)
  CommandBody body;
  bool operator==(const Command&) const = default;
};

}  // namespace gpuex::matching
