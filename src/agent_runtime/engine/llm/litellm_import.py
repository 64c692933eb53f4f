"""The only place LiteLLM is imported: lazily, and with the offline price map forced first."""

from __future__ import annotations

import importlib
import logging
import os
import warnings
from types import ModuleType

# LiteLLM's TypedDicts mark fields `ReadOnly`; pydantic warns once per class when LiteLLM first validates
# one, mid-request. Not actionable by us, and ops would read it as an error. The same text for pytest is
# in pyproject.toml (pytest resets the filters around every test).
_READONLY_WARNING = r"Items? .* on TypedDict class .* using the `ReadOnly` qualifier"


def load_litellm() -> ModuleType:
    # Without this LiteLLM fetches its price map from the network at import time (no network here,
    # and a stall of seconds in production). It must be set before the first import anywhere.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    warnings.filterwarnings("ignore", message=_READONLY_WARNING, category=UserWarning)
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    _skip_litellms_own_pricing()
    _quiet_reasoning_placeholder()
    _default_encoding_on_first_use()
    return litellm


class _ReasoningPlaceholderFilter(logging.Filter):
    """LiteLLM warns on every thinking-mode DeepSeek call, once per assistant message in the history that has no
    reasoning, and sends a one-space placeholder for it (`_fill_reasoning_content` in its DeepSeek transformation).
    Those are answers without tool calls, whose reasoning DeepSeek ignores (guides/thinking_mode), or tool calls
    made with thinking off, which have none: every tool-call message with reasoning carries it (engine/conversation).
    Not actionable, and at that rate it would bury the logs ops read."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "is missing `reasoning_content`" not in record.getMessage()


_PLACEHOLDER_FILTER = _ReasoningPlaceholderFilter()


def _quiet_reasoning_placeholder() -> None:
    from litellm._logging import verbose_logger

    if _PLACEHOLDER_FILTER not in verbose_logger.filters:
        verbose_logger.addFilter(_PLACEHOLDER_FILTER)


def _no_response_cost(self: object, *args: object, **kwargs: object) -> None:
    return None


def _skip_litellms_own_pricing() -> None:
    """LiteLLM prices every non-streamed call itself (`Logging.response_cost_calculator`, for the response's
    hidden params and its logging callbacks), a cost we never read (docs/benchmarks.md, "Agent flow": the three
    CPU cuts, with engine/flow/crewai/env.py's two). We register no LiteLLM callback and
    read no LiteLLM cost: engine/billing prices every call from its usage and our dated price list. None is what
    LiteLLM itself reports for a call it cannot price, so its callers handle it."""
    from litellm.litellm_core_utils.litellm_logging import Logging

    Logging.response_cost_calculator = _no_response_cost  # type: ignore[method-assign]


class EncodingOnFirstUse:
    """LiteLLM's default tiktoken encoding (`cl100k_base`), loaded when something first reads it.

    LiteLLM loads it on the first DeepSeek or OpenAI call only to hand it to the provider's response parser,
    which does not read it for these providers (usage comes with the answer; our token counts use DeepSeek's
    own tokenizer): ~40 MB of RSS and ~0.2 s of CPU on the first call, for nothing (docs/benchmarks.md, "Load")."""

    def __init__(self) -> None:
        self._encoding: object | None = None

    def __getattr__(self, name: str) -> object:
        if self._encoding is None:
            from litellm._lazy_imports import get_default_encoding

            self._encoding = get_default_encoding()
        return getattr(self._encoding, name)


def _default_encoding_on_first_use() -> None:
    """`litellm.main.encoding` is resolved by the module's `__getattr__` on first access and then cached in its
    namespace; set first, ours is the one `litellm.main._get_encoding` hands to every provider (PATCHES.md row 9)."""
    main = importlib.import_module("litellm.main")
    if "encoding" not in vars(main):
        main.encoding = EncodingOnFirstUse()  # type: ignore[attr-defined]
