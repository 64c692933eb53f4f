"""`forget_memory`: delete the caller's long-term memories that match what the user asks to forget ("forget that I
live in Paris"). It deletes the user's data, so the YAML grants it with `requires_approval: true`: the tool runs
only once the user approves the call and its arguments. The memories deleted are always the run's own user's
(bound through the run's context), those at least USER_MEMORIES_FORGET_MIN_SIMILARITY similar, at most five.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, Field

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.flow.tools.base import Tool, ToolArgs
from agent_runtime.engine.profiles.models import UserAgentContext


class MemoryForgetter(Protocol):
    async def forget(self, ctx: RequestContext, what: str) -> list[str]:
        """Delete the memories most like `what`; returns their texts."""
        ...


class ForgetMemoryArgs(ToolArgs):
    what: str = Field(
        min_length=1, max_length=500, description="What to forget, as the user said it, e.g. 'I live in Paris'."
    )


class ForgetMemoryResult(BaseModel):
    forgotten: list[str] = Field(description="The memories deleted (none matched: empty).")


class ForgetMemoryTool(Tool[ForgetMemoryArgs]):
    def __init__(self, forgetter: MemoryForgetter) -> None:
        super().__init__(
            name="forget_memory",
            description="Delete what the assistant remembers about the user that matches the given text "
            "(long-term memory; runs only after the user approves).",
            args_model=ForgetMemoryArgs,
        )
        self._forgetter = forgetter

    async def execute(self, args: ForgetMemoryArgs, ctx: UserAgentContext) -> ForgetMemoryResult:
        return ForgetMemoryResult(
            forgotten=await self._forgetter.forget(RequestContext(user_id=ctx.user_id), args.what)
        )
