-- A key revoked in the database (DELETE /v1/keys on any server, `gpuexd admin revoke-key`, or SQL) is
-- announced to every running gpuexd, whose health monitor LISTENs: the key stops working there too
-- without waiting for a restart (a key is otherwise checked against PostgreSQL once, then cached).
CREATE FUNCTION gpuex_key_revoked() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('gpuex_key_revoked', NEW.id);
  RETURN NULL;
END
$$;

CREATE TRIGGER api_keys_revoked AFTER UPDATE OF revoked_at ON api_keys
  FOR EACH ROW WHEN (OLD.revoked_at IS NULL AND NEW.revoked_at IS NOT NULL)
  EXECUTE FUNCTION gpuex_key_revoked();
