-- "0 = no limit" for every per-user quota, also in the database: the service maps 0 to an unset setting
-- (settings.py, `user_quotas`), but a session that set `agent_runtime.<name>` to 0 itself (manual SQL) was
-- refused everything, since a count or a sum is always >= 0.
CREATE OR REPLACE FUNCTION user_quota(name text) RETURNS numeric AS $$
    SELECT nullif(nullif(current_setting('agent_runtime.' || name, true), '')::numeric, 0)
$$ LANGUAGE sql STABLE;
