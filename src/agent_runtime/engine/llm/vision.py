"""Images on the wire: which models take them, and the markers that carry them through the flow's text.

The flow (CrewAI) carries a conversation as text, so a user message's images ride in its text as markers
(`image_marker`); the run's gateway swaps them for the message's `images` (`with_images`) once it knows the
call's model, and `call_builder` sends them as OpenAI-style `image_url` parts after the text (DeepSeek's vision
guide: `content` as a list of blocks, inline images as `data:` URLs). A model outside LLM_IMAGE_MODELS never
gets an image: a call that would carry one fails naming the model instead of dropping it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from agent_runtime.engine.errors import AppError
from agent_runtime.engine.llm.models import WireMessage
from agent_runtime.settings import DEMO_MODEL, Settings

# Invisible separators keep a marker off any word the user wrote around it.
_MARKER = "\u2063[image {id}]\u2063"
MARKER_RE = re.compile("\u2063\\[image ([0-9A-Za-z_-]{1,64})\\]\u2063")


class ImagesNotAcceptedError(AppError):
    status_code = 422
    code = "images_not_supported"


def image_marker(image_id: str) -> str:
    return _MARKER.format(id=image_id)


def image_models(settings: Settings) -> frozenset[str]:
    """LLM_IMAGE_MODELS, and the offline demo model, which says what it was shown (demo/provider.py)."""
    return frozenset({DEMO_MODEL, *(m.strip() for m in settings.llm_image_models.split(",") if m.strip())})


def with_images(
    messages: list[WireMessage], images: Mapping[str, str], *, model: str, accepted: frozenset[str]
) -> list[WireMessage]:
    """`messages` with each user message's markers taken out of its text and its images (their URLs, from
    `images`: the run's own session's) put on it. A marker `images` does not know stays text (a user may type one)."""
    out: list[WireMessage] = []
    for message in messages:
        found = MARKER_RE.findall(message.content or "") if message.role == "user" else []
        urls = [images[key] for key in found if key in images]
        if not urls:
            out.append(message)
            continue
        if model not in accepted:
            raise ImagesNotAcceptedError(
                f"the model {model} does not accept images (LLM_IMAGE_MODELS: {', '.join(sorted(accepted)) or 'none'})"
            )
        text = MARKER_RE.sub(lambda m: "" if m.group(1) in images else m.group(0), message.content or "")
        out.append(message.model_copy(update={"content": text, "images": urls}))
    return out
