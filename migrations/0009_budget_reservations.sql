-- Budgets as reservations (README "Limits, quotas and budgets"). 0007 checked a budget only against what was
-- already spent, so N runs admitted together could each spend the rest: a budget exceeded by the concurrency
-- factor. Now a run holds the worst-case cost of its calls (engine/runs/lease/reservation.py): it is admitted
-- only if its first hold fits beside what is spent and what the user's other runs in progress hold, in the
-- statement that admits it, and its hold grows before any call it does not cover, checked the same way (the
-- trigger below, under the user's gate row). The hold stands while the session runs and is settled when the
-- run ends: to the stored per-message costs (the finish), or, for a run whose process died (the sweep's
-- `run_lost`), to its hold less what it stored, since what its cut calls cost is unknown.

-- The hold of the session's current run; it counts only while the session is `running`.
ALTER TABLE agent_chat_sessions
    ADD COLUMN run_reserved_cny numeric(20, 10) NOT NULL DEFAULT 0 CHECK (run_reserved_cny >= 0);

-- `reserved_cny`: what the run reserved (a record). `unrecorded_cny`: what a lost run is charged beyond its
-- stored rows; back to 0 if its process finishes after all and stores them (engine/runs/lease/store.py).
ALTER TABLE agent_runs
    ADD COLUMN reserved_cny numeric(20, 10) NOT NULL DEFAULT 0 CHECK (reserved_cny >= 0),
    ADD COLUMN unrecorded_cny numeric(20, 10) NOT NULL DEFAULT 0 CHECK (unrecorded_cny >= 0);
CREATE INDEX idx_runs_user_unrecorded ON agent_runs (user_id, finished_at) WHERE unrecorded_cny > 0;

-- What a user has spent today and this month (calendar day and month in UTC) and what their runs in progress
-- have reserved, but for `except_session`'s: one definition for the trigger and for GET /v1/usage.
CREATE FUNCTION user_budget_use(uid uuid, except_session uuid)
RETURNS TABLE (spent_day numeric, spent_month numeric, reserved numeric) AS $$
    WITH day AS (SELECT date_trunc('day', now(), 'UTC') AS start),
         month AS (SELECT date_trunc('month', now(), 'UTC') AS start),
         stored AS (
             SELECT coalesce(sum(cost) FILTER (WHERE created_at >= (SELECT start FROM day)), 0) AS d,
                    coalesce(sum(cost), 0) AS m
               FROM agent_chat_messages
              WHERE user_id = uid AND created_at >= (SELECT start FROM month)
         ),
         lost AS (
             SELECT coalesce(sum(unrecorded_cny) FILTER (WHERE finished_at >= (SELECT start FROM day)), 0) AS d,
                    coalesce(sum(unrecorded_cny), 0) AS m
               FROM agent_runs
              WHERE user_id = uid AND unrecorded_cny > 0 AND finished_at >= (SELECT start FROM month)
         ),
         held AS (
             SELECT coalesce(sum(run_reserved_cny), 0) AS r
               FROM agent_chat_sessions
              WHERE user_id = uid AND status = 'running' AND id IS DISTINCT FROM except_session
         )
    SELECT stored.d + lost.d, stored.m + lost.m, held.r FROM stored, lost, held
$$ LANGUAGE sql STABLE;

-- Raises AR402 when `needed` does not fit in budget `name` (NULL: no limit) beside what is spent and held, or the
-- budget is used up (a run needing nothing is refused then too).
CREATE FUNCTION refuse_over_budget(name text, lim numeric, spent numeric, held numeric, needed numeric,
                                   resets_at timestamptz) RETURNS void AS $$
BEGIN
    IF lim IS NOT NULL AND (spent + held >= lim OR spent + held + needed > lim) THEN
        RAISE EXCEPTION '% budget %: % CNY spent, % held, this run needs %', name, lim, spent, held, needed
            USING ERRCODE = 'AR402',
                  DETAIL = json_build_object('budget', name, 'limit', lim, 'spent', spent, 'reserved', held,
                                             'needed', needed, 'resets_at', resets_at)::text;
    END IF;
END;
$$ LANGUAGE plpgsql;

-- Replaces 0007's version: the same limits at a start; a budget now refuses a run whose hold does not fit, and
-- the trigger also checks a hold that grows while the session runs (engine/runs/lease/reservation.py). A run
-- holding nothing (an unpriced or free model) is refused only once the budget is used up, as before.
CREATE OR REPLACE FUNCTION enforce_user_run_limit() RETURNS trigger AS $$
DECLARE
    max_runs numeric := user_quota('max_runs_per_user');
    per_min  numeric := user_quota('max_runs_per_minute');
    daily    numeric := user_quota('daily_budget_cny');
    monthly  numeric := user_quota('monthly_budget_cny');
    starting boolean;
    running  integer;
    recent   integer;
    oldest   timestamptz;
    use      record;
BEGIN
    IF NEW.status <> 'running' THEN
        RETURN NEW;
    END IF;
    starting := NOT (TG_OP = 'UPDATE' AND OLD.status = 'running' AND OLD.run_id IS NOT DISTINCT FROM NEW.run_id);
    IF NOT starting AND NEW.run_reserved_cny <= OLD.run_reserved_cny THEN
        RETURN NEW;
    END IF;
    IF max_runs IS NULL AND per_min IS NULL AND daily IS NULL AND monthly IS NULL THEN
        RETURN NEW;
    END IF;
    PERFORM lock_user_gate(NEW.user_id);
    IF starting AND max_runs IS NOT NULL THEN
        SELECT count(*) INTO running FROM agent_chat_sessions
         WHERE user_id = NEW.user_id AND status = 'running' AND lease_expires_at > now() AND id <> NEW.id;
        IF running >= max_runs THEN
            RAISE EXCEPTION 'user % already has % runs in progress (limit %)', NEW.user_id, running, max_runs
                USING ERRCODE = 'AR429';
        END IF;
    END IF;
    IF starting AND per_min IS NOT NULL THEN
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
        SELECT * INTO use FROM user_budget_use(NEW.user_id, NEW.id);
        PERFORM refuse_over_budget('daily', daily, use.spent_day, use.reserved, NEW.run_reserved_cny,
                                   date_trunc('day', now(), 'UTC') + interval '1 day');
        PERFORM refuse_over_budget('monthly', monthly, use.spent_month, use.reserved, NEW.run_reserved_cny,
                                   date_trunc('month', now(), 'UTC') + interval '1 month');
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

DROP TRIGGER trg_user_run_limit ON agent_chat_sessions;
CREATE TRIGGER trg_user_run_limit
    BEFORE INSERT OR UPDATE OF status, run_id, run_reserved_cny ON agent_chat_sessions
    FOR EACH ROW EXECUTE FUNCTION enforce_user_run_limit();
