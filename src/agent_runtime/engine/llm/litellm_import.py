"""The only place LiteLLM is imported: lazily, and with the offline price map forced first."""

from __future__ import annotations

import os
from types import ModuleType


def load_litellm() -> ModuleType:
    # Without this LiteLLM fetches its price map from the network at import time (no network here,
    # and a 4-8 s stall in production). It must be set before the first import anywhere.
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    return litellm
