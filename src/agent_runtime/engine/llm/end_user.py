"""The opaque end-user id sent with every model call (DeepSeek's `user_id`, api-docs.deepseek.com/zh-cn/quick_start/
rate_limit): it isolates the provider's KV cache, content-safety history and scheduling per end user, so one user's
cached prefixes are never another's. A keyed hash: stable for a user across sessions, replicas and restarts, and no
one without the key (the provider included) can tell which of our users it is."""

from __future__ import annotations

import hashlib
import hmac
from uuid import UUID

from pydantic import SecretStr

# Domain separation: the JWT secret also signs tokens; this derives an unrelated value from it.
_LABEL = b"agent-runtime/llm-end-user/v1:"


def end_user_id(secret: SecretStr, user_id: UUID) -> str:
    """`u` + 32 hex digits (128 bits of HMAC-SHA256): DeepSeek allows [A-Za-z0-9_-], at most 512 bytes."""
    digest = hmac.new(secret.get_secret_value().encode(), _LABEL + user_id.bytes, hashlib.sha256).hexdigest()
    return f"u{digest[:32]}"
