"""The SQL of a takeover (engine/runs/takeover/): the resume point a run stores, and the claim of expired runs."""

from __future__ import annotations

from agent_runtime.engine.sessions.repository import SESSION_COLUMNS

# $1 run_id, $2 user_id, $3 the decided intent (IntentDecided)
RESUME_POINT_SQL = """
UPDATE agent_runs SET resume_point = $3::jsonb WHERE id = $1 AND user_id = $2 AND status = 'running'
"""

# A draining process gives a run to the next sweep of another replica: its lease ends now, with what it had sent
# ($5, its estimate: the takeover charges it once). Only while this process ($4) holds it.
# $1 session_id, $2 user_id, $3 run_id, $4 lease owner, $5 sent
RELEASE_SQL = """
WITH released AS (
    UPDATE agent_chat_sessions SET lease_expires_at = now() - interval '1 millisecond', updated_at = now()
     WHERE id = $1 AND user_id = $2 AND run_id = $3 AND status = 'running' AND lease_owner = $4
    RETURNING run_id
)
UPDATE agent_runs r SET sent_cny = greatest(r.sent_cny, $5) FROM released l WHERE r.id = l.run_id AND r.user_id = $2
"""

# The seqs of a taken-over run's events start past any the dead process numbered (engine/runs/events/log.py).
TAKEOVER_SEQ_STRIDE = 1_000_000

# Not scoped by user: the system recovering every user's runs whose process died (as the sweep, which fails those
# left over). Never its own runs: a live process that let a lease expire ended that run itself (a database outage)
# or stops it (engine/runs/ledger/keeper.py). At most $2 runs (the room this process has), each taken over fewer
# than $3 times; the session gets this process's lease ($1, $4 seconds). What the dead process had sent (its last
# renewal's estimate, at most the hold if any) less what the run stored since its last takeover is charged once;
# the next attempt's estimate starts at zero.
# $1 lease owner, $2 how many, $3 most takeovers, $4 lease seconds
CLAIM_SQL = f"""
WITH expired AS (
    SELECT s.id FROM agent_chat_sessions s
      JOIN agent_runs r ON r.id = s.run_id AND r.user_id = s.user_id
     WHERE s.status = 'running' AND s.lease_expires_at < now() AND s.lease_owner <> $1
       AND r.status = 'running' AND r.run_input IS NOT NULL AND r.takeovers < $3
     ORDER BY s.lease_expires_at LIMIT $2
       FOR UPDATE OF s SKIP LOCKED
), claimed AS (
    UPDATE agent_chat_sessions s
       SET lease_owner = $1, lease_expires_at = now() + make_interval(secs => $4), updated_at = now()
      FROM expired e WHERE s.id = e.id
    RETURNING {", ".join(f"s.{column.strip()}" for column in SESSION_COLUMNS.split(","))}, s.user_id, s.run_id,
              s.client_state, s.run_reserved_cny
), stored AS (
    SELECT c.run_id, coalesce(sum(m.cost), 0) AS cny
      FROM claimed c LEFT JOIN agent_chat_messages m
        ON m.session_id = c.id AND m.user_id = c.user_id AND m.metadata ->> 'run_id' = c.run_id::text
     GROUP BY c.run_id
), runs AS (
    UPDATE agent_runs r
       SET takeovers = r.takeovers + 1, sent_cny = 0, settled_cny = st.cny,
           unrecorded_cny = r.unrecorded_cny
                            + greatest(least(r.sent_cny, nullif(c.run_reserved_cny, 0)) - (st.cny - r.settled_cny), 0)
      FROM claimed c JOIN stored st ON st.run_id = c.run_id
     WHERE r.id = c.run_id AND r.user_id = c.user_id
    RETURNING r.id, r.run_input, r.resume_point, r.first_seq, r.takeovers
)
SELECT c.*, r.run_input, r.resume_point, r.first_seq, r.takeovers,
       (SELECT to_jsonb(p) FROM profiles p WHERE p.user_id = c.user_id) AS profile,
       EXISTS (SELECT 1 FROM user_memories m WHERE m.user_id = c.user_id) AS has_memories,
       COALESCE((SELECT g.generation FROM user_memory_generations g WHERE g.user_id = c.user_id), 0)
           AS memory_generation
  FROM claimed c JOIN runs r ON r.id = c.run_id
"""
