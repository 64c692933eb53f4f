"""Pull `assistant_text` out of a stage's JSON while the model is still writing it.

The user-facing stages answer with a JSON object (JSON mode); to stream the answer token by token
we re-parse the growing buffer with pydantic-core's partial mode and emit only the new suffix of
`assistant_text`. Re-parsing is O(n) per delta, O(n^2) per answer; answers are a few KB, where this
costs well under a millisecond in total, so an incremental parser is not worth its complexity.
"""

from __future__ import annotations

import logging

from pydantic_core import from_json

log = logging.getLogger(__name__)


class AssistantTextExtractor:
    """Feed raw deltas; get back the new characters of `assistant_text` (empty string if none).

    `required_route`: only stream when the object's `route` equals it (the intent stage streams its
    text only for DIRECT_EXECUTION); `route` is written before `assistant_text` by contract.
    """

    def __init__(self, *, required_route: str | None = None) -> None:
        self._buffer: list[str] = []
        self._required_route = required_route
        self.emitted = ""

    def feed(self, delta: str) -> str:
        self._buffer.append(delta)
        text = self._current_text()
        if text is None or len(text) <= len(self.emitted):
            return ""
        if not text.startswith(self.emitted):
            # Defensive: a partial parse that rendered the end of the text differently than the fuller
            # one (the gateway uses one extractor per attempt, so retries never get here). Streamed text
            # cannot be retracted in AG-UI; the gateway's final `show` starts a new message if needed.
            log.warning("partial parse changed streamed assistant_text; not re-streaming")
            return ""
        new = text[len(self.emitted) :]
        self.emitted = text
        return new

    def _current_text(self) -> str | None:
        raw = "".join(self._buffer)
        start = raw.find("{")
        if start < 0:
            return None
        try:
            parsed = from_json(raw[start:], allow_partial="trailing-strings")
        except ValueError:
            return None
        if not isinstance(parsed, dict):
            return None
        if self._required_route is not None and parsed.get("route") != self._required_route:
            return None
        text = parsed.get("assistant_text")
        return text if isinstance(text, str) else None
