"""Offline token counting for the window's token budget, through LiteLLM's tokenizer for the model."""

from __future__ import annotations

import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import lru_cache

from agent_runtime.engine.llm.litellm_import import load_litellm
from agent_runtime.engine.memory.convert import to_wire
from agent_runtime.engine.memory.messages import ChatMessage

TokenCounter = Callable[[ChatMessage], int]
"""Tokens one message costs in the model input. Counting messages one by one includes each message's
framing, so the sum over a window is an upper bound of the whole window's count (never an underestimate)."""

_CACHE_SIZE = 4096


class LiteLLMTokenCounter:
    """Counts with `litellm.token_counter`; remembers the last few thousand counts.

    Every `get` re-reads mostly the same messages, and tokenizing them again costs about a millisecond
    each on the event loop. Keys are digests of the wire form, so the cache holds no message text.
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        # A plain lock: the window may be computed in a worker thread as well as on the event loop.
        self._lock = threading.Lock()

    def __call__(self, message: ChatMessage) -> int:
        wire = to_wire(message)
        key = hashlib.sha256(json.dumps(wire, sort_keys=True).encode()).digest()
        with self._lock:
            if key in self._counts:
                self._counts.move_to_end(key)
                return self._counts[key]
        count = int(load_litellm().token_counter(model=self.model, messages=[wire]))
        with self._lock:
            self._counts[key] = count
            if len(self._counts) > _CACHE_SIZE:
                self._counts.popitem(last=False)
        return count


@lru_cache(maxsize=16)
def litellm_token_counter(model: str) -> LiteLLMTokenCounter:
    """The process-wide counter for `model`, so its cache is shared by every window computed for it."""
    return LiteLLMTokenCounter(model)
