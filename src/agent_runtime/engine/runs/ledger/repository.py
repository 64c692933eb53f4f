"""The SQL of a run's life (start, finish, lease renewal, the sweep, the log repair, retention, the run list) and
the records its long statements take (the convention is in `engine/sessions/repository.py`). Every statement
on a user's rows takes the owner (`user_id`); the sweep, the repair and retention are the system's (below).

The start and the finish take 24 and 20 parameters: each has a record (`StartRecord`, `FinishRecord`) whose
`args()` is the one place that orders them, next to a map of what each `$n` is, so that the statement and its
arguments are read and changed together.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from agent_runtime.engine.conversation.repository import INSERT_ROWS_SQL, incoming_rows_sql
from agent_runtime.engine.runs.events.repository import EVENTS_CHANNEL, LOST_RUN_SEQ
from agent_runtime.engine.sessions.repository import SESSION_COLUMNS
from agent_runtime.engine.usage.repository import SUMS

_ROWS = Field(description="The nine arrays of `MessageBatch.arrays()`, unnested by `incoming_rows_sql`.")


class StartRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    session_id: UUID
    user_id: UUID
    run_id: UUID
    lease_owner: str
    lease_seconds: float
    visible: int = Field(description="How many of the rows are visible (they take seqs from next_seq).")
    audit: int = Field(description="How many are audit rows (seqs from next_audit_seq, downwards).")
    title: str | None = Field(description="The title the session takes if it has none.")
    rows: list[list[Any]] = _ROWS
    pending_id: str | None = Field(description="The pending turn the run was planned against (None: none).")
    client_state: dict[str, JsonValue] | None
    reserved_cny: Decimal = Field(
        ge=0, description="The most the run holds against the user's budgets at its start (a user with no history)."
    )
    regenerate: bool = Field(default=False, description="The run answers the last user turn again.")
    least_reserved_cny: Decimal = Field(ge=0, description="The least it holds at its start.")
    run_input: dict[str, JsonValue] | None = Field(
        description="The run's input (RunInput as JSON) a takeover runs again; None: the run cannot be taken over."
    )
    resume_point: dict[str, JsonValue] | None = Field(description="The decided intent of the turn it continues.")

    def args(self) -> list[Any]:
        # $1 session_id, $2 user_id, $3 run_id, $4 lease_owner, $5 lease_seconds, $6 visible, $7 audit, $8 title,
        # $9-$17 rows, $18 pending_id, $19 client_state, $20 reserved_cny, $21 regenerate, $22 least_reserved_cny,
        # $23 run_input, $24 resume_point
        return [
            self.session_id,
            self.user_id,
            self.run_id,
            self.lease_owner,
            self.lease_seconds,
            self.visible,
            self.audit,
            self.title,
            *self.rows,
            self.pending_id,
            self.client_state,
            self.reserved_cny,
            self.regenerate,
            self.least_reserved_cny,
            self.run_input,
            self.resume_point,
        ]


class FinishRecord(BaseModel):
    model_config = ConfigDict(frozen=True)

    session_id: UUID
    user_id: UUID
    run_id: UUID
    outcome: Literal["completed", "failed"] = Field(description="The session's status.")
    error_id: str | None
    error_code: str | None
    visible: int
    audit: int
    first_seq: int = Field(description="The run's first visible row: the run wrote the visible rows after it.")
    rows: list[list[Any]] = _ROWS
    run_status: Literal["completed", "failed", "cancelled"] = Field(description="The run row's status.")
    waiting: dict[str, JsonValue] | None = Field(description="The session's pending turn from here on.")

    def args(self) -> list[Any]:
        # $1 session_id, $2 user_id, $3 run_id, $4 outcome, $5 error_id, $6 error_code, $7 visible, $8 audit,
        # $9 first_seq, $10-$18 rows, $19 run_status, $20 waiting
        return [
            self.session_id,
            self.user_id,
            self.run_id,
            self.outcome,
            self.error_id,
            self.error_code,
            self.visible,
            self.audit,
            self.first_seq,
            *self.rows,
            self.run_status,
            self.waiting,
        ]


START_SQL = f"""
WITH recent AS (
    SELECT id, session_id, created_at FROM agent_runs
     WHERE user_id = $2 AND status = 'completed' ORDER BY created_at DESC LIMIT 10
), reserve AS (
    -- What the run holds (engine/runs/ledger/reservation.py): twice what the user's last completed runs cost on
    -- average, or the dearest of them when it cost more, between $22 and $20; $20 with no completed run.
    -- Their rows were all written after they started. Nothing is read when the run holds nothing (no budget).
    SELECT CASE WHEN $20::numeric = 0 THEN 0 ELSE least($20, greatest($22::numeric, coalesce((
               SELECT greatest(2 * sum(c.cost) / count(*), max(c.cost)) FROM (
                   SELECT coalesce(sum(m.cost), 0) AS cost
                     FROM recent r LEFT JOIN agent_chat_messages m
                       ON m.user_id = $2 AND m.session_id = r.session_id AND m.metadata ->> 'run_id' = r.id::text
                      AND m.created_at >= (SELECT min(created_at) FROM recent)
                    GROUP BY r.id) c
           ), $20))) END AS cny
), started AS (
    UPDATE agent_chat_sessions
       SET status = 'running', run_id = $3::uuid, run_started_at = now(), error_id = NULL, updated_at = now(),
           lease_owner = $4, lease_expires_at = now() + make_interval(secs => $5),
           next_seq = next_seq + $6, next_audit_seq = next_audit_seq - $7, title = COALESCE(title, $8),
           state_snapshot = state_snapshot || jsonb_build_object('status', 'running', 'run_id', $3::text,
                                                                 'error_id', NULL),
           pending_turn = NULL, client_state = COALESCE($19::jsonb, client_state),
           run_reserved_cny = (SELECT cny FROM reserve)
     WHERE id = $1 AND user_id = $2 AND status <> 'running'
       -- The run was planned against this pending turn (engine/runs/request/pending.py), or none: it takes it.
       AND (pending_turn ->> 'id') IS NOT DISTINCT FROM $18::text
       -- A regeneration answers the last user message again: there must be one.
       AND (NOT $21::bool OR EXISTS (SELECT 1 FROM agent_chat_messages u
                                     WHERE u.session_id = $1 AND u.user_id = $2 AND u.seq > 0 AND u.role = 'user'))
    RETURNING {SESSION_COLUMNS}, next_seq - $6 AS first_seq, next_audit_seq + $7 AS first_audit_seq, client_state,
              run_reserved_cny
), run AS (
    INSERT INTO agent_runs (id, session_id, user_id, reserved_cny, run_input, first_seq, resume_point)
    SELECT $3::uuid, id, $2, run_reserved_cny, $23::jsonb, first_seq, $24::jsonb FROM started
), superseded AS (
    -- The reply it replaces: every visible row after the last user message that no earlier regeneration
    -- replaced, up to the last one stored (the session row's lock, taken above, keeps others from appending).
    INSERT INTO agent_chat_superseded (session_id, user_id, from_seq, to_seq, run_id)
    SELECT $1, $2, b.after + 1, s.first_seq - 1, $3::uuid
      FROM started s CROSS JOIN LATERAL (
           SELECT greatest(
                      (SELECT max(seq) FROM agent_chat_messages
                        WHERE session_id = $1 AND user_id = $2 AND seq > 0 AND role = 'user'),
                      (SELECT max(to_seq) FROM agent_chat_superseded WHERE session_id = $1 AND user_id = $2)
                  ) AS after) b
     WHERE $21::bool AND b.after + 1 <= s.first_seq - 1
), inserted AS (
    {INSERT_ROWS_SQL}
    FROM {incoming_rows_sql(9)} CROSS JOIN started c
)
SELECT s.*, (SELECT to_jsonb(p) FROM profiles p WHERE p.user_id = $2) AS profile,
       EXISTS (SELECT 1 FROM user_memories m WHERE m.user_id = $2) AS has_memories,
       COALESCE((SELECT g.generation FROM user_memory_generations g WHERE g.user_id = $2), 0) AS memory_generation
  FROM started s
"""

FINISH_SQL = f"""
WITH c AS (
    UPDATE agent_chat_sessions
       SET status = $4::text, error_id = $5::text, updated_at = now(), lease_owner = NULL, lease_expires_at = NULL,
           next_seq = next_seq + $7, next_audit_seq = next_audit_seq - $8, pending_turn = $20::jsonb,
           state_snapshot = state_snapshot || jsonb_build_object('status', $4::text, 'run_id', $3::text,
                                                                 'error_id', $5::text)
     WHERE id = $1 AND user_id = $2 AND run_id = $3::uuid AND status = 'running'
    RETURNING next_seq - $7 AS first_seq, next_audit_seq + $8 AS first_audit_seq, billing_currency
), run AS (
    UPDATE agent_runs SET status = $19::text, error_code = $6::text, error_id = $5::text, finished_at = now()
     WHERE id = $3::uuid AND user_id = $2 AND status = 'running' AND EXISTS (SELECT 1 FROM c)
), ins AS (
    {INSERT_ROWS_SQL}
    FROM {incoming_rows_sql(10)} CROSS JOIN c
    RETURNING input_tokens, output_tokens, cost, metadata
), m AS (
    -- This run's rows: those just inserted, and those it wrote before (tool rows), which are the visible
    -- rows from its first input row on (a session runs one run at a time, and `c` proves it still is ours;
    -- a regeneration has no input row: its first tool row takes that seq).
    SELECT input_tokens, output_tokens, cost, metadata FROM ins
    UNION ALL
    SELECT input_tokens, output_tokens, cost, metadata FROM agent_chat_messages
     WHERE session_id = $1 AND user_id = $2 AND seq >= $9 AND EXISTS (SELECT 1 FROM c)
)
SELECT EXISTS (SELECT 1 FROM c) AS owned, {SUMS} FROM m WHERE m.metadata ? 'cost_source'
"""

# A run's hold grows (engine/runs/ledger/reservation.py) by $4, or by the budgets' room when that is less, but by at
# least $5; the trigger refuses it (AR402) when the budget has no room for that. The room is read before the trigger
# takes the user's gate: another run's growth can still take it first, and the trigger decides.
GROW_HOLD_SQL = """
UPDATE agent_chat_sessions s
   SET run_reserved_cny = run_reserved_cny + greatest($5::numeric, least($4::numeric, coalesce((
           SELECT least(user_quota('daily_budget_cny') - u.spent_day, user_quota('monthly_budget_cny') - u.spent_month)
                  - u.reserved - s.run_reserved_cny
             FROM user_budget_use($2, $1) u), $4)))
 WHERE id = $1 AND user_id = $2 AND run_id = $3 AND status = 'running'
RETURNING run_reserved_cny
"""

# What the user's other runs in progress hold: room one of them may free when it settles.
OTHERS_HOLD_SQL = """
SELECT coalesce(sum(run_reserved_cny), 0) FROM agent_chat_sessions
 WHERE user_id = $1 AND id <> $2 AND status = 'running'
"""

TAKEOVERS_SQL = "SELECT takeovers FROM agent_runs WHERE id = $1 AND user_id = $2"

# A run the sweep failed finished after all and stored its rows: they hold what it spent, so the sweep's charge goes.
SETTLE_LATE_SQL = "UPDATE agent_runs SET unrecorded_cny = 0 WHERE id = $1 AND user_id = $2"

# Also stores each renewed run's estimate of what it has sent ($6, RunHold.sent), which only grows: what the sweep
# charges if the run's process dies.
RENEW_SQL = """
WITH renewed AS (
    UPDATE agent_chat_sessions s SET lease_expires_at = now() + make_interval(secs => $2)
      FROM unnest($3::uuid[], $4::uuid[], $5::uuid[], $6::numeric[]) AS h(session_id, user_id, run_id, sent)
     WHERE s.id = h.session_id AND s.user_id = h.user_id AND s.run_id = h.run_id
       AND s.status = 'running' AND s.lease_owner = $1 AND s.lease_expires_at > now()
    RETURNING s.run_id, s.user_id, h.sent
), sent AS (
    UPDATE agent_runs r SET sent_cny = n.sent FROM renewed n
     WHERE r.id = n.run_id AND r.user_id = n.user_id AND n.sent > r.sent_cny
)
SELECT n.run_id,
       EXISTS (SELECT 1 FROM agent_runs r
                WHERE r.id = n.run_id AND r.user_id = n.user_id AND r.cancel_requested_at IS NOT NULL) AS cancel
  FROM renewed n
"""


class LogEndings(BaseModel):
    """The terminal events the sweep and the log repair store for runs whose process died, as the AG-UI JSON
    the event mapper writes (`engine/runs/agui/mapper.py`, `log_endings`), with slots each statement fills per
    run: so that these logs end in the same words and shape as every other run's, and no event is written
    in SQL."""

    model_config = ConfigDict(frozen=True)

    lost: str = Field(description="RUN_ERROR `run_lost`, with ERROR_ID_SLOT.")
    failed: str = Field(description="RUN_ERROR of a failed run, with ERROR_CODE_SLOT and ERROR_ID_SLOT.")
    finished: str = Field(description="RUN_FINISHED, with THREAD_ID_SLOT and RUN_ID_SLOT.")


# What fills a slot needs no JSON escaping: error ids are hex (uuid4().hex, or the sweep's below) and run and
# session ids are uuids. An error code is any text: its slot is a whole JSON string, replaced by `to_json`.
ERROR_ID_SLOT = "@error_id@"
ERROR_CODE_SLOT = "@error_code@"
THREAD_ID_SLOT = "@thread_id@"
RUN_ID_SLOT = "@run_id@"

# Not scoped by user: the sweep is the system recovering every user's runs whose process died, and it
# returns nothing to any caller. SKIP LOCKED lets several replicas sweep at once without waiting on each other.
# A run another process may still take over (engine/runs/takeover/: taken over fewer than $3 times) is left to
# that for $4 seconds after its lease expired.
# $1 the batch size, $2 LogEndings.lost, $3 most takeovers, $4 the takeover's grace in seconds
SWEEP_SQL = f"""
WITH expired AS (
    SELECT s.id, replace(gen_random_uuid()::text, '-', '') AS error_id FROM agent_chat_sessions s
     WHERE s.status = 'running' AND s.lease_expires_at < now()
       AND NOT EXISTS (SELECT 1 FROM agent_runs r
                        WHERE r.id = s.run_id AND r.user_id = s.user_id AND r.run_input IS NOT NULL
                          AND r.takeovers < $3 AND s.lease_expires_at > now() - make_interval(secs => $4))
     ORDER BY s.lease_expires_at LIMIT $1
       FOR UPDATE OF s SKIP LOCKED
), lost AS (
    UPDATE agent_chat_sessions s
       SET status = 'failed', error_id = e.error_id, updated_at = now(), lease_owner = NULL, lease_expires_at = NULL,
           state_snapshot = s.state_snapshot || jsonb_build_object('status', 'failed', 'run_id', s.run_id::text,
                                                                   'error_id', e.error_id)
      FROM expired e WHERE s.id = e.id
    RETURNING s.id AS session_id, s.user_id, s.run_id, s.error_id, s.run_reserved_cny AS held
), runs AS (
    -- Charged the estimate of what it had sent (its last renewal's), at most its hold when it holds any (a user with
    -- budgets), less what it stored since its last takeover: what its calls cost never reached the ledger otherwise.
    UPDATE agent_runs r
       SET status = 'failed', error_code = 'run_lost', error_id = l.error_id, finished_at = now(), log_complete = true,
           unrecorded_cny = r.unrecorded_cny + greatest(least(r.sent_cny, nullif(l.held, 0)) - (
               SELECT coalesce(sum(m.cost), 0) FROM agent_chat_messages m
                WHERE m.session_id = l.session_id AND m.user_id = l.user_id AND m.metadata ->> 'run_id' = l.run_id::text
           ) + r.settled_cny, 0)
      FROM lost l WHERE r.id = l.run_id AND r.user_id = l.user_id AND r.status = 'running'
    RETURNING r.id, r.user_id, r.error_id
), lost_events AS (
    -- The stream's end, for whoever resumes it (the process that would have written one is gone).
    INSERT INTO agent_run_events (run_id, seq, user_id, data, terminal)
    SELECT id, {LOST_RUN_SEQ}, user_id, replace($2::text, '{ERROR_ID_SLOT}', error_id), true
      FROM runs
    ON CONFLICT (run_id, seq) DO NOTHING
)
SELECT l.session_id, l.user_id, l.run_id, l.error_id, pg_notify('{EVENTS_CHANNEL}', l.run_id::text) IS NULL AS woke
  FROM lost l
"""

# A run that finished but whose process died before its terminal event was stored (a moment's window):
# its log gets an ending too, so that a resumed stream never waits forever. Grace: the owner writes it
# within milliseconds when alive. Not scoped by user either, for the sweep's reasons.
# $1 the batch size, $2 the grace in seconds, $3 LogEndings.failed, $4 LogEndings.finished
REPAIR_SQL = f"""
WITH incomplete AS (
    SELECT id, user_id, session_id, status, error_code, error_id FROM agent_runs
     WHERE NOT log_complete AND status <> 'running' AND finished_at < now() - make_interval(secs => $2)
     ORDER BY finished_at LIMIT $1
       FOR UPDATE SKIP LOCKED
), closed AS (
    UPDATE agent_runs r SET log_complete = true FROM incomplete i WHERE r.id = i.id RETURNING r.id
), ins AS (
    INSERT INTO agent_run_events (run_id, seq, user_id, data, terminal)
    SELECT i.id, {LOST_RUN_SEQ}, i.user_id, CASE
               WHEN i.status = 'failed'
               THEN replace(replace($3::text, '"{ERROR_CODE_SLOT}"', to_json(i.error_code)::text),
                            '{ERROR_ID_SLOT}', i.error_id)
               ELSE replace(replace($4::text, '{THREAD_ID_SLOT}', i.session_id::text), '{RUN_ID_SLOT}', i.id::text)
           END, true
      FROM incomplete i
    ON CONFLICT (run_id, seq) DO NOTHING
)
SELECT id, pg_notify('{EVENTS_CHANNEL}', id::text) IS NULL AS woke FROM closed
"""

# Retention: the events of runs that finished long enough ago; the run rows (history, error ids) stay.
EXPIRE_SQL = """
WITH old AS (
    UPDATE agent_runs SET events_expired = true
     WHERE id IN (SELECT id FROM agent_runs
                   WHERE NOT events_expired AND finished_at < now() - make_interval(secs => $1)
                   ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED)
    RETURNING id, user_id
)
DELETE FROM agent_run_events e USING old WHERE e.run_id = old.id AND e.user_id = old.user_id
"""

# The session's pending turn goes with the run that left it (`engine/runs/request/pending.py`).
LIST_SQL = """
SELECT r.id, r.status, r.error_code, r.error_id, r.created_at, r.finished_at, count(*) OVER () AS total,
       CASE WHEN s.pending_turn ->> 'run_id' = r.id::text THEN s.pending_turn END AS pending_turn
  FROM agent_runs r
  JOIN agent_chat_sessions s ON s.id = r.session_id AND s.user_id = r.user_id
 WHERE r.session_id = $1 AND r.user_id = $2
 ORDER BY r.created_at DESC, r.id DESC LIMIT $3 OFFSET $4
"""

COUNT_SQL = "SELECT count(*) FROM agent_runs WHERE session_id = $1 AND user_id = $2"
