"""What a run takes in, read from the database: the session's pending turn and AG-UI state (the convention is
in `engine/sessions/repository.py`). Every statement takes the owner (`user_id`)."""

from __future__ import annotations

# `last_user_id`: the thread's last user message (user rows are never replaced by a regeneration: its range
# starts after one), the turn a regeneration answers again. `run_id`: the session's latest run (running or not:
# a reconnecting client joins it or is told how it ended).
AGUI_STATE_SQL = """
SELECT pending_turn, client_state, run_id, status = 'running' AS running,
       (SELECT r.status FROM agent_runs r WHERE r.id = s.run_id AND r.user_id = $2) AS run_status,
       ARRAY(SELECT message_id FROM agent_chat_messages
              WHERE session_id = $1 AND user_id = $2 AND message_id = ANY($3::text[])) AS stored_ids,
       (SELECT message_id FROM agent_chat_messages
         WHERE session_id = $1 AND user_id = $2 AND seq > 0 AND role = 'user'
         ORDER BY seq DESC LIMIT 1) AS last_user_id
  FROM agent_chat_sessions s WHERE s.id = $1 AND s.user_id = $2
"""
