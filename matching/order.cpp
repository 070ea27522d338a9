// Order helpers: which bids are kept out of the L2 levels, and the idempotency hash of a body.
#include "matching/order.hpp"

#include "matching/digest.hpp"

namespace gpuex::matching {

bool BidConstraints::has_attribute_constraints() const {
  return !tiers.empty() || !regions.empty() || nvlink || min_fabric || min_fabric_gbps || min_sla_pct_x1000 ||
         green_only || max_pue_x1000 || min_renewable_pct_x100 || max_carbon_g_per_kwh_x100 || single_pool;
}

namespace {

template <class T>
void opt(Fnv1a& h, const std::optional<T>& v) {
  h.i64(v.has_value() ? 1 : 0);
  if (!v) return;
  if constexpr (requires { v->value; }) {
    h.i64(v->value);
  } else {
    h.i64(static_cast<std::int64_t>(*v));
  }
}

}  // namespace

std::uint64_t body_hash(const OrderRequest& r) {
  Fnv1a h;
  h.i64(static_cast<std::int64_t>(r.side));
  h.str(r.client_order_id);
  h.str(r.market.value());
  h.i64(r.pool.value);
  h.i64(r.price.value);
  h.i64(r.quantity.value);
  opt(h, r.start);
  opt(h, r.end);
  opt(h, r.duration);
  const BidConstraints& c = r.constraints;
  h.i64(static_cast<std::int64_t>(c.tiers.size()));
  for (Tier t : c.tiers) h.i64(static_cast<std::int64_t>(t));
  h.i64(static_cast<std::int64_t>(c.regions.size()));
  for (const std::string& g : c.regions) h.str(g);
  h.i64(c.nvlink);
  opt(h, c.min_fabric);
  opt(h, c.min_fabric_gbps);
  opt(h, c.min_sla_pct_x1000);
  h.i64(c.green_only);
  opt(h, c.max_pue_x1000);
  opt(h, c.min_renewable_pct_x100);
  opt(h, c.max_carbon_g_per_kwh_x100);
  h.i64(c.single_pool);
  h.i64(c.interruptible);
  h.i64(r.min_duration.value);
  h.i64(r.min_chunk.value);
  h.i64(static_cast<std::int64_t>(r.time_in_force));
  opt(h, r.expire_at);
  h.i64(r.post_only);
  h.i64(static_cast<std::int64_t>(r.stp));
  return h.value();
}

}  // namespace gpuex::matching
