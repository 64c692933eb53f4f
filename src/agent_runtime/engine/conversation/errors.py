"""Errors raised by chat memory; all render as 4xx through the engine's one error tree."""

from __future__ import annotations

from agent_runtime.engine.errors import BadRequestError, ConflictError


class InvalidConversationIdError(BadRequestError):
    code = "invalid_conversation_id"


class UnrepresentableMessageError(BadRequestError):
    """A message (wire dict or AG-UI model) carries something our typed messages cannot hold.

    Raised instead of dropping the part we cannot keep, so a caller never stores half a message.
    """

    code = "unrepresentable_message"


class DuplicateMessageError(ConflictError):
    code = "duplicate_message"
