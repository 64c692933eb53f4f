"""Memories as the API and the engine see them, and the extraction task's JSON contract."""

from __future__ import annotations

from datetime import datetime
from typing import Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field

from agent_runtime.engine.pagination import Page


class Memory(BaseModel):
    id: UUID
    text: str = Field(description="A third-person fact about the user, e.g. 'The user lives in Paris.'")
    source_message_ids: list[str] = Field(description="The messages the fact was taken from (newest last).")
    source_session_id: UUID | None = Field(description="The session it was last taken from; null once deleted.")
    created_at: datetime
    updated_at: datetime
    similarity: float | None = Field(default=None, description="Cosine similarity to `q` (searches by `q` only).")


class MemoryPage(Page[Memory]):
    pass


class RecalledMemory(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: UUID
    text: str
    similarity: float


class MemoryOperation(BaseModel):
    """One change the turn makes to what is known about the user."""

    action: Literal["add", "update", "delete"] = Field(
        description="add a new fact; update a known fact the turn changes or contradicts; delete one it retracts"
    )
    memory_id: str | None = Field(
        default=None, max_length=8, description="For update and delete: the id of a known memory (m1, m2, ...)."
    )
    fact: str | None = Field(
        default=None,
        max_length=1000,
        description="For add and update: one durable fact, in the third person, starting with 'The user' "
        "(or '用户'), in the language the user wrote in.",
    )


class MemoryExtraction(BaseModel):
    """The memory_extraction task's answer: what the turn adds, updates or contradicts (often nothing)."""

    operations: list[MemoryOperation] = Field(default_factory=list, max_length=10)


class TurnFacts(BaseModel):
    """What a finished turn hands the extraction: the user's words and the reply, with their message ids."""

    model_config = ConfigDict(frozen=True)

    session_id: UUID
    run_id: str
    user_text: str
    user_message_ids: list[str]
    answer_text: str
    answer_message_id: str | None
    # The user had memories when the run started: the extraction looks for the related ones (else there are none).
    had_memories: bool = True
    # The owner's generation when the run started: a delete-all since then bumped it, and the extraction writes nothing.
    memory_generation: int = Field(ge=0)
