-- One index serves both listings of GET /v1/orders (open orders, and all orders), instead of
-- orders_account (account_id, id DESC) and the partial orders_account_open beside it: each new open
-- order took two B-tree inserts into them, each rewritten order (a status change defeats HOT) two or
-- three. The listing of open orders reads the entries whose second key is true, the listing of all
-- orders merges the true and the false entries by id (server/routes_orders.cpp); both stay bounded
-- by the page size however many orders an account has, open or ended.
CREATE INDEX orders_account_listing ON orders (account_id, (status IN ('open', 'partially_filled')), id DESC);
DROP INDEX orders_account;
DROP INDEX orders_account_open;
