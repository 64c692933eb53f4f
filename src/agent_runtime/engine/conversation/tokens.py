"""Offline token counting for the window's token budget, through LiteLLM's tokenizer for the model
(engine/llm/tokenizer.py: which one; the first counter of a model without its own says so in a warning).

Per message: LiteLLM counts a list of messages as OpenAI does, content plus 3-4 framing tokens per message
plus 3 for the reply's priming, once per call. Counting one message at a time would add those 3 to every
message, so they are taken off (`_PRIMING`): the sum over a window is then LiteLLM's count of the whole
window less 3. Against what DeepSeek bills, the framing is the overcount: its chat template marks a message
with one special token (`<｜User｜>`, `<｜Assistant｜>`), so a text message is counted 3-4 tokens high, a tool
call 3 and a tool result 7 (its call id included; tests/conversation/test_memory_tokens.py measures them): at most
140 of a 20-message window's 8,000 tokens, and the content itself is never undercounted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from agent_runtime.engine.conversation.chat_messages import ChatMessage
from agent_runtime.engine.conversation.convert import to_wire
from agent_runtime.engine.llm.tokenizer import count_tokens, tokenizer_info

TokenCounter = Callable[[ChatMessage], int]
"""Tokens one message costs in the model input, its framing included (see the module docstring)."""

# A long window holds hundreds of messages (MEMORY_MAX_MESSAGES); at ~100 bytes an entry this is ~3 MB.
_CACHE_SIZE = 32_768
# LiteLLM's count of an empty message list: the reply's priming, counted once per call (see the docstring).
_PRIMING = 3

logger = logging.getLogger(__name__)


class LiteLLMTokenCounter:
    """Counts with `litellm.token_counter`; remembers the last few thousand counts.

    Every `get` re-reads mostly the same messages, and tokenizing them again costs about a millisecond
    each on the event loop. Keys are digests of the wire form, so the cache holds no message text.
    """

    def __init__(self, model: str) -> None:
        self.model = model
        self.info = tokenizer_info(model)
        if self.info.exact:
            logger.info("chat memory counts tokens with %s for %s", self.info.tokenizer, model)
        else:
            logger.warning(
                "LiteLLM has no tokenizer of %s's own: the chat memory counts its tokens with %s, an approximation",
                model,
                self.info.tokenizer,
            )
        self._counts: OrderedDict[bytes, int] = OrderedDict()
        # A plain lock: the window may be computed in a worker thread as well as on the event loop.
        self._lock = threading.Lock()

    def __call__(self, message: ChatMessage) -> int:
        return self.count_wire(to_wire(message))

    def count_wire(self, wire: dict[str, Any]) -> int:
        """One message in its chat-completions form (what a model request carries)."""
        key = hashlib.sha256(json.dumps(wire, sort_keys=True).encode()).digest()
        with self._lock:
            if key in self._counts:
                self._counts.move_to_end(key)
                return self._counts[key]
        count = count_tokens(self.model, [wire]) - _PRIMING
        with self._lock:
            self._counts[key] = count
            if len(self._counts) > _CACHE_SIZE:
                self._counts.popitem(last=False)
        return count


@lru_cache(maxsize=16)
def token_counter_for(model: str) -> LiteLLMTokenCounter:
    """The process-wide counter for `model`, so its cache is shared by every window computed for it."""
    return LiteLLMTokenCounter(model)
