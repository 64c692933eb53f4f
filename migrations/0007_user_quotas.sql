-- Per-user quotas and CNY budgets (README "Limits, quotas and budgets"), enforced here so they hold across
-- replicas and under concurrency: each check first takes the user's gate row (user_run_gates), which
-- serialises one user's run starts and session creations; the count or sum that follows is a new statement,
-- whose snapshot sees everything committed before. The limits are session settings each replica puts on its
-- connections (db/pool.py); an unset one is no limit. Errors carry their own SQLSTATE and a JSON DETAIL.

CREATE INDEX idx_runs_user_created ON agent_runs (user_id, created_at);

CREATE FUNCTION user_quota(name text) RETURNS numeric AS $$
    SELECT nullif(current_setting('agent_runtime.' || name, true), '')::numeric
$$ LANGUAGE sql STABLE;

CREATE FUNCTION lock_user_gate(uid uuid) RETURNS void AS $$
    INSERT INTO user_run_gates (user_id) VALUES (uid) ON CONFLICT (user_id) DO UPDATE SET user_id = EXCLUDED.user_id
$$ LANGUAGE sql;

-- Replaces 0003's version: the same concurrency limit, plus runs per minute and the daily/monthly budgets.
CREATE OR REPLACE FUNCTION enforce_user_run_limit() RETURNS trigger AS $$
DECLARE
    max_runs  numeric := user_quota('max_runs_per_user');
    per_min   numeric := user_quota('max_runs_per_minute');
    daily     numeric := user_quota('daily_budget_cny');
    monthly   numeric := user_quota('monthly_budget_cny');
    running   integer;
    recent    integer;
    oldest    timestamptz;
    spent_day numeric;
    spent_mon numeric;
BEGIN
    IF NEW.status <> 'running'
       OR (TG_OP = 'UPDATE' AND OLD.status = 'running' AND OLD.run_id IS NOT DISTINCT FROM NEW.run_id)
       OR (max_runs IS NULL AND per_min IS NULL AND daily IS NULL AND monthly IS NULL) THEN
        RETURN NEW;
    END IF;
    PERFORM lock_user_gate(NEW.user_id);
    IF max_runs IS NOT NULL THEN
        SELECT count(*) INTO running FROM agent_chat_sessions
         WHERE user_id = NEW.user_id AND status = 'running' AND lease_expires_at > now() AND id <> NEW.id;
        IF running >= max_runs THEN
            RAISE EXCEPTION 'user % already has % runs in progress (limit %)', NEW.user_id, running, max_runs
                USING ERRCODE = 'AR429';
        END IF;
    END IF;
    IF per_min IS NOT NULL THEN
        SELECT count(*), min(created_at) INTO recent, oldest FROM agent_runs
         WHERE user_id = NEW.user_id AND created_at > now() - interval '1 minute';
        IF recent >= per_min THEN
            RAISE EXCEPTION 'user % started % runs in the last minute (limit %)', NEW.user_id, recent, per_min
                USING ERRCODE = 'AR430',
                      DETAIL = json_build_object('retry_after',
                          ceil(extract(epoch FROM oldest + interval '1 minute' - now())))::text;
        END IF;
    END IF;
    IF daily IS NOT NULL OR monthly IS NOT NULL THEN
        -- Calendar days and months in UTC; the stored per-message costs are the ledger.
        SELECT coalesce(sum(cost) FILTER (WHERE created_at >= date_trunc('day', now(), 'UTC')), 0),
               coalesce(sum(cost), 0)
          INTO spent_day, spent_mon
          FROM agent_chat_messages
         WHERE user_id = NEW.user_id AND created_at >= date_trunc('month', now(), 'UTC');
        IF daily IS NOT NULL AND spent_day >= daily THEN
            RAISE EXCEPTION 'user % spent % CNY today (budget %)', NEW.user_id, spent_day, daily
                USING ERRCODE = 'AR402',
                      DETAIL = json_build_object('budget', 'daily', 'limit', daily, 'spent', spent_day,
                                                 'resets_at', date_trunc('day', now(), 'UTC') + interval '1 day')::text;
        END IF;
        IF monthly IS NOT NULL AND spent_mon >= monthly THEN
            RAISE EXCEPTION 'user % spent % CNY this month (budget %)', NEW.user_id, spent_mon, monthly
                USING ERRCODE = 'AR402',
                      DETAIL = json_build_object('budget', 'monthly', 'limit', monthly, 'spent', spent_mon,
                                                 'resets_at', date_trunc('month', now(), 'UTC') + interval '1 month')::text;
        END IF;
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE FUNCTION enforce_user_session_limit() RETURNS trigger AS $$
DECLARE
    max_sessions numeric := user_quota('max_sessions_per_user');
    owned        integer;
BEGIN
    IF max_sessions IS NULL THEN
        RETURN NEW;
    END IF;
    PERFORM lock_user_gate(NEW.user_id);
    SELECT count(*) INTO owned FROM agent_chat_sessions WHERE user_id = NEW.user_id;
    IF owned >= max_sessions THEN
        RAISE EXCEPTION 'user % has % sessions (limit %)', NEW.user_id, owned, max_sessions
            USING ERRCODE = 'AR431';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER trg_user_session_limit
    BEFORE INSERT ON agent_chat_sessions
    FOR EACH ROW EXECUTE FUNCTION enforce_user_session_limit();
