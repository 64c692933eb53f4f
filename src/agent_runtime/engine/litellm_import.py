"""The only place LiteLLM is imported: lazily, and with the offline price map forced first."""

from __future__ import annotations

import os
import warnings
from types import ModuleType

# LiteLLM's TypedDicts mark fields `ReadOnly`; pydantic warns once per class when LiteLLM first validates
# one, mid-request. Not actionable by us, and ops would read it as an error. The same text for pytest is
# in pyproject.toml (pytest resets the filters around every test).
_READONLY_WARNING = r"Items? .* on TypedDict class .* using the `ReadOnly` qualifier"


def load_litellm() -> ModuleType:
    # Without this LiteLLM fetches its price map from the network at import time (no network here,
    # and a 4-8 s stall in production). It must be set before the first import anywhere.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    warnings.filterwarnings("ignore", message=_READONLY_WARNING, category=UserWarning)
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm
