"""The usage domain's SQL: sums over message rows, as named statements (the convention is in
`engine/sessions/repository.py`). Every statement takes the owner (`user_id`)."""

from __future__ import annotations

import asyncpg

from agent_runtime.engine.usage.models import UsageTotals

# A row "is a model call" when it carries a cost source; user rows and tool results carry none.
SUMS = """
    COALESCE(sum(m.input_tokens), 0)::bigint AS input_tokens,
    COALESCE(sum(m.output_tokens), 0)::bigint AS output_tokens,
    COALESCE(sum((m.metadata ->> 'cached_tokens')::bigint), 0)::bigint AS cached_tokens,
    COALESCE(sum(m.cost), 0) AS cost,
    count(*) FILTER (WHERE m.metadata ? 'cost_source')::bigint AS model_calls
"""
_RANGE = "($2::timestamptz IS NULL OR m.created_at >= $2) AND ($3::timestamptz IS NULL OR m.created_at < $3)"

SESSION_OWNED_SQL = "SELECT 1 FROM agent_chat_sessions WHERE id = $1 AND user_id = $2"

# The grand-total row (GROUPING SETS ()) sorts first; an empty session has only that row.
SESSION_BY_STAGE_SQL = f"""
SELECT COALESCE(m.metadata ->> 'stage', 'unknown') AS stage, {SUMS}
FROM agent_chat_messages m
WHERE m.session_id = $1 AND m.user_id = $2 AND m.metadata ? 'cost_source'
GROUP BY GROUPING SETS ((1), ())
ORDER BY GROUPING(COALESCE(m.metadata ->> 'stage', 'unknown')) DESC, 1
"""

USER_TOTALS_SQL = f"""
SELECT {SUMS}, count(DISTINCT m.session_id) FILTER (WHERE m.metadata ? 'cost_source') AS sessions
FROM agent_chat_messages m
WHERE m.user_id = $1 AND m.metadata ? 'cost_source' AND {_RANGE}
"""

USER_BY_SESSION_SQL = f"""
SELECT m.session_id, s.title, {SUMS}
FROM agent_chat_messages m
JOIN agent_chat_sessions s ON s.id = m.session_id AND s.user_id = m.user_id
WHERE m.user_id = $1 AND m.metadata ? 'cost_source' AND {_RANGE}
GROUP BY m.session_id, s.title, s.created_at
ORDER BY sum(m.cost) DESC, s.created_at DESC, m.session_id
LIMIT $4 OFFSET $5
"""

# What the database checks before a run starts (migrations/0009: spent, and reserved by runs in progress), now.
BUDGETS_SQL = """
SELECT spent_day, spent_month, reserved,
       date_trunc('day', now(), 'UTC') + interval '1 day' AS day_resets_at,
       date_trunc('month', now(), 'UTC') + interval '1 month' AS month_resets_at
  FROM user_budget_use($1, NULL)
"""

RUN_TOTALS_SQL = f"""
SELECT {SUMS} FROM agent_chat_messages m
WHERE m.session_id = $1 AND m.user_id = $2 AND m.metadata ->> 'run_id' = $3 AND m.metadata ? 'cost_source'
"""


def totals_of(row: asyncpg.Record) -> UsageTotals:
    return UsageTotals(
        input_tokens=row["input_tokens"],
        output_tokens=row["output_tokens"],
        cached_tokens=row["cached_tokens"],
        cost=row["cost"],
        model_calls=row["model_calls"],
    )
