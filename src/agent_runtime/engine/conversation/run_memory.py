"""The memory of one agent run: the session's cache-aware window as the flow's history (one statement unless
the window is cut), with a summary of the cut turns made by the configured model when summaries are on."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol
from uuid import UUID

import asyncpg

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.conversation.chat_memory import MessageWindowChatMemory
from agent_runtime.engine.conversation.chat_messages import ChatMessage, SystemMessage
from agent_runtime.engine.conversation.postgres import PostgresChatMemoryRepository
from agent_runtime.engine.conversation.stored_messages import NewMessage
from agent_runtime.engine.conversation.summarizer import ModelSummarizer, SummaryCall
from agent_runtime.engine.conversation.window import WindowPolicy
from agent_runtime.engine.llm.client import LLMClient
from agent_runtime.settings import Settings


class SummaryTask(Protocol):
    """The YAML summary task (FlowTemplates): its request text, its output-token cap, and how the stage calls sent a
    user turn (the summary call repeats their prefix)."""

    def render_summary_task(self, max_words: int) -> str: ...

    def user_turn(self, text: str) -> str: ...

    @property
    def summary_max_tokens(self) -> int: ...


def memory_policy(settings: Settings) -> WindowPolicy:
    summary_tokens = settings.memory_summary_max_tokens if settings.memory_summary else None
    head_tokens = min(settings.memory_head_tokens, (settings.memory_max_tokens - (summary_tokens or 0)) // 2)
    return WindowPolicy(
        max_messages=settings.memory_max_messages,
        max_tokens=settings.memory_max_tokens,
        low_messages=settings.memory_low_messages,
        low_tokens=settings.memory_low_tokens,
        summary_tokens=summary_tokens,
        keep_turns=settings.memory_keep_exchanges + 1,
        head_tokens=head_tokens or None,
        model=settings.effective_llm_model,
    )


def summary_max_words(max_tokens: int) -> int:
    # The framing takes ~90 of the reserved tokens; an English word is ~1.3 tokens and a Chinese character
    # ~0.6, so half the rest in words keeps either language inside (the reply is clipped if it is not).
    return max(20, (max_tokens - 90) // 2)


async def run_history(
    *,
    settings: Settings,
    pool: asyncpg.Pool,
    ctx: RequestContext,
    session_id: UUID,
    run_id: str,
    current_message_id: str | None,
    system_prompt: str,
    llm: LLMClient,
    task: SummaryTask,
    record: Callable[[NewMessage], None],
    call: SummaryCall,
) -> list[ChatMessage]:
    """The history the run's stages see (after their system prompt): summary, then the window's turns, without
    the run's own user message (the stages quote it in their task; None keeps the whole window, for a caller
    that finds the turn itself). A summary call's audit row goes to `record`, for the run to write with its
    end."""
    policy = memory_policy(settings)
    summarizer = None
    if policy.summary_tokens is not None:
        summarizer = ModelSummarizer(
            llm,
            record,
            run_id=run_id,
            call=call,
            system=SystemMessage(content=system_prompt),
            task=task.render_summary_task(summary_max_words(policy.summary_tokens)),
            user_turn=task.user_turn,
            reply_max_tokens=task.summary_max_tokens,
            max_tokens=policy.summary_tokens,
            counter=policy.counter(),
            max_repairs=settings.stage_max_json_retries,
        )
    memory = MessageWindowChatMemory(PostgresChatMemoryRepository(pool, ctx), policy, summarizer=summarizer)
    window = await memory.window(str(session_id))
    return [m for m in window.as_messages() if m.id != current_message_id]
