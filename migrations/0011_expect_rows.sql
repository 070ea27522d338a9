-- An assertion for the writer's set-based statements: `SELECT gpuex_expect_rows(count(*), n, what)` over
-- the rows a data-modifying CTE returned fails the transaction unless exactly n rows were touched. The
-- writer's UPDATE of changed orders joins an unnest of their ids with `orders`; a missing row would be
-- skipped without a word and the store would silently fall behind the engine. Raised inside the
-- transaction, it aborts the batch before its COMMIT (the server then stops writes and rebuilds).
CREATE FUNCTION gpuex_expect_rows(actual bigint, expected bigint, what text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF actual IS DISTINCT FROM expected THEN
    RAISE EXCEPTION '% touched % rows, not %', what, actual, expected USING ERRCODE = 'data_exception';
  END IF;
END
$$;
