"""`update_bio`: replace the caller's profile bio. It changes the user's data, so the YAML grants it with
`requires_approval: true`: the run stops at the model's call and the tool runs only once the user approves
(AG-UI interrupt and resume), with the arguments the user approved.

The profile written is always the run's own user (bound through the run's context), never one the model names.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel, Field

from agent_runtime.engine.context import RequestContext
from agent_runtime.engine.flow.tools.base import Tool, ToolArgs
from agent_runtime.engine.profiles.models import UserAgentContext

# The stored bio allows 4000 characters; the system prompt shows the model the first 512.
MAX_BIO_CHARS = 4000


class BioWriter(Protocol):
    async def set_bio(self, ctx: RequestContext, bio: str) -> str:
        """Store `bio` as the user's bio; returns the stored text."""
        ...


class UpdateBioArgs(ToolArgs):
    bio: str = Field(min_length=1, max_length=MAX_BIO_CHARS, description="The new bio, in full.")


class UpdateBioResult(BaseModel):
    bio: str
    updated: bool = True


class UpdateBioTool(Tool[UpdateBioArgs]):
    def __init__(self, writer: BioWriter) -> None:
        super().__init__(
            name="update_bio",
            description="Replace the user's profile bio with the given text (runs only after the user approves).",
            args_model=UpdateBioArgs,
            idempotent=True,
        )
        self._writer = writer

    async def execute(self, args: UpdateBioArgs, ctx: UserAgentContext) -> UpdateBioResult:
        return UpdateBioResult(bio=await self._writer.set_bio(RequestContext(user_id=ctx.user_id), args.bio))
