"""The run event log's SQL (`agent_run_events`, and the run row's log flags and cancel mark), and the names of
the LISTEN/NOTIFY channels its statements notify on (the convention is in `engine/sessions/repository.py`).
Every statement takes the owner (`user_id`).

Channels: `agent_run_events` (payload: run id) wakes the followers of a run when its events are written;
`agent_run_control` (payload `follow:<run id>` or `cancel:<run id>`) asks the process that runs it to write
its events as they come, or to stop it. NOTIFY is only the wake-up: the log and `agent_runs` are the truth.
"""

from __future__ import annotations

EVENTS_CHANNEL = "agent_run_events"
CONTROL_CHANNEL = "agent_run_control"
# The seq of a terminal event the sweep writes for a run whose process died: after anything that process
# may have streamed to its client without storing it.
LOST_RUN_SEQ = 2_147_483_647

# A terminal batch first marks the log complete, on the run row's latest version: if the sweep ended the
# log meanwhile (the run was lost), nothing is added after its terminal event.
APPEND_SQL = f"""
WITH open_run AS (
    SELECT 1 FROM agent_runs WHERE id = $1 AND user_id = $2 AND NOT log_complete
), closed AS (
    UPDATE agent_runs SET log_complete = true WHERE id = $1 AND user_id = $2 AND $6 AND NOT log_complete
    RETURNING 1
), ins AS (
    INSERT INTO agent_run_events (run_id, seq, user_id, data, terminal)
    SELECT $1, e.seq, $2, e.data, e.terminal FROM unnest($3::int[], $4::text[], $5::bool[]) AS e(seq, data, terminal)
     WHERE CASE WHEN $6 THEN EXISTS (SELECT 1 FROM closed) ELSE EXISTS (SELECT 1 FROM open_run) END
    ON CONFLICT (run_id, seq) DO NOTHING
)
SELECT pg_notify('{EVENTS_CHANNEL}', $1::text) WHERE $7
"""

# One round trip per read of a follower: the run's state and the next page of its log, in one snapshot (so "the
# log is complete and has nothing after `position`" is never a race between two reads), plus, when asked and the
# run still runs, the NOTIFY that makes the process running it write its events as they come. `$5` = 0 reads
# the state only. The NOTIFY is in an uncorrelated subquery: evaluated once, not per event row.
PAGE_SQL = f"""
WITH run AS (
    SELECT status, log_complete, events_expired FROM agent_runs WHERE id = $1 AND session_id = $2 AND user_id = $3
), asked AS (
    SELECT pg_notify('{CONTROL_CHANNEL}', 'follow:' || $1::text) FROM run WHERE $6 AND status = 'running'
)
SELECT run.status, run.log_complete, run.events_expired, (SELECT count(*) FROM asked) AS asked,
       e.seq, e.data, e.terminal
  FROM run
  LEFT JOIN LATERAL (
      SELECT seq, data, terminal FROM agent_run_events
       WHERE run_id = $1 AND user_id = $3 AND seq > $4 ORDER BY seq LIMIT $5
  ) e ON true
 ORDER BY e.seq
"""

CANCEL_SQL = f"""
UPDATE agent_runs
   SET cancel_requested_at = CASE WHEN status = 'running' THEN COALESCE(cancel_requested_at, now()) END
 WHERE id = $1 AND session_id = $2 AND user_id = $3
RETURNING status, pg_notify('{CONTROL_CHANNEL}', 'cancel:' || id::text) IS NULL AS notified
"""
