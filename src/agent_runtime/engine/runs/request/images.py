"""Images of a user message: read from AG-UI content parts or the REST body, checked before the run starts.

- Only `image` parts (AG-UI 1.0 InputContent) are taken, from a `data` source (base64) or an https `url` source;
  audio, video, document and file sources are a 422 naming what is supported (never dropped).
- Inline data must decode, fit MAX_IMAGE_BYTES, and its magic bytes must be the declared type (JPEG, PNG, WebP);
  a message takes at most MAX_IMAGES_PER_MESSAGE images. A URL is never fetched by the server (no SSRF surface):
  the provider downloads it (DeepSeek: public http(s) URL, 32 MiB, 60 s); only https is taken, at most 2,048
  characters, without credentials (`user:pw@` would hand them to the provider), and not to a host that names this
  side of a network (an IP literal that is not global: loopback, private, link-local, shared, reserved; or a name
  such as localhost, *.local, *.internal, or one without a dot). Names are not resolved: a public name that
  resolves to a private address is the fetcher's to refuse.
- Every stage's model must accept images (LLM_IMAGE_MODELS), else a 422 naming the model: a stage that cannot see
  the image would answer without it, which is worse than refusing.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import socket
from collections.abc import Mapping, Sequence
from typing import Literal, get_args
from urllib.parse import urlsplit
from uuid import uuid4

import ag_ui.core as agui
from pydantic import BaseModel, ConfigDict, Field, model_validator

from agent_runtime.engine.conversation.chat_messages import ImageAttachment, UserMessage
from agent_runtime.engine.errors import ErrorDetail, ValidationFailedError
from agent_runtime.engine.llm.models import CallOptions
from agent_runtime.engine.llm.vision import image_models
from agent_runtime.settings import Settings

ImageMime = Literal["image/jpeg", "image/png", "image/webp"]
IMAGE_TYPES: tuple[str, ...] = get_args(ImageMime)
SUPPORTED = "supported: text and image parts (image/jpeg, image/png, image/webp; base64 data or an https URL)"
MAX_IMAGE_URL_CHARS = 2048


def _invalid(loc: list[str | int], msg: str, message: str = "unsupported message content") -> ValidationFailedError:
    return ValidationFailedError(message, details=[ErrorDetail(loc=loc, msg=msg)])


def sniff_image_type(data: bytes) -> str | None:
    """The image type the bytes' magic numbers say (what DeepSeek itself goes by), or None."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


# A 1x1 PNG: the OpenAPI example of an inline image.
_PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4nGNgYGBgAAAABQABXvMqGgAAAABJRU5ErkJggg=="


class ImageInput(BaseModel):
    """One image of a REST run's message: base64 `data` with its `mime_type`, or an https `url`."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "mime_type": "image/png",
                    "data": _PNG_1PX,
                },
                {"url": "https://example.com/cat.jpg"},
            ]
        },
    )

    mime_type: ImageMime | None = Field(default=None, description="Required with `data`; optional with `url`.")
    data: str | None = Field(default=None, min_length=1, description="The image's bytes, base64 (no data: prefix).")
    url: str | None = Field(default=None, min_length=1, max_length=MAX_IMAGE_URL_CHARS, description="https only.")

    @model_validator(mode="after")
    def _one_source(self) -> ImageInput:
        if (self.data is None) == (self.url is None):
            raise ValueError("give either `data` (with `mime_type`) or `url`")
        if self.data is not None and self.mime_type is None:
            raise ValueError("`data` needs its `mime_type`")
        return self

    def attachment(self) -> ImageAttachment:
        return ImageAttachment(id=uuid4().hex, mime_type=self.mime_type, data=self.data, url=self.url)


# Names that never denote a public host: RFC 6761 (localhost), 6762 (.local), 8375 (home.arpa), ICANN's .internal.
_LOCAL_NAMES = ("localhost", "local", "internal", "home.arpa", "localdomain")


def _ip_literal(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    # The forms URL parsers and resolvers also read as IPv4 (127.1, 0x7f000001, 2130706433); inet_aton is pure.
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def _url_problem(url: str) -> str | None:
    """Why an image URL cannot be passed on to the provider, or None."""
    try:
        parts = urlsplit(url)
        host = (parts.hostname or "").rstrip(".")
        credentials = parts.username is not None or parts.password is not None
    except ValueError:
        return "an image URL must be a valid https URL"
    if parts.scheme != "https" or not host or len(url) > MAX_IMAGE_URL_CHARS:
        return f"an image URL must be https, at most {MAX_IMAGE_URL_CHARS} characters"
    if credentials:
        return "an image URL must not carry credentials (user:password@)"
    ip = _ip_literal(host)
    if ip is not None:
        mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
        if not ip.is_global or (mapped is not None and not mapped.is_global):
            return f"an image URL's host must be public: {host} is a loopback, private or link-local address"
        return None
    if "." not in host or any(host == name or host.endswith(f".{name}") for name in _LOCAL_NAMES):
        return f"an image URL's host must be public: {host} names a local host"
    return None


def _image_part(part: agui.ImageInputContent, loc: list[str | int]) -> ImageAttachment:
    source = part.source
    if isinstance(source, agui.InputContentDataSource):
        if source.mime_type not in IMAGE_TYPES:
            raise _invalid([*loc, "source", "mimeType"], f"{source.mime_type!r} is not {SUPPORTED}")
        return ImageAttachment(id=uuid4().hex, mime_type=source.mime_type, data=source.value)
    if isinstance(source, agui.InputContentUrlSource):
        mime = source.mime_type if source.mime_type in IMAGE_TYPES else None
        if source.mime_type is not None and mime is None:
            raise _invalid([*loc, "source", "mimeType"], f"{source.mime_type!r} is not {SUPPORTED}")
        if len(source.value) > MAX_IMAGE_URL_CHARS:
            # Before the attachment is built (its field has the same cap): the rest is checked with REST's images.
            raise _invalid([*loc, "source", "value"], f"an image URL has at most {MAX_IMAGE_URL_CHARS} characters")
        return ImageAttachment(id=uuid4().hex, mime_type=mime, url=source.value)
    raise _invalid([*loc, "source"], f"a {source.type} source cannot be taken; {SUPPORTED}")


class UserContent(BaseModel):
    text: str = Field(description="The text parts, joined with newlines.")
    images: list[ImageAttachment]


class BlindStage(BaseModel):
    stage: str
    model: str


def content_parts(parts: Sequence[agui.InputContentPart], loc: list[str | int]) -> UserContent:
    """An AG-UI user message's parts as its text and its images."""
    texts: list[str] = []
    images: list[ImageAttachment] = []
    for index, part in enumerate(parts):
        if isinstance(part, agui.TextPart):
            texts.append(part.text)
        elif isinstance(part, agui.ImageInputContent):
            images.append(_image_part(part, [*loc, index]))
        else:
            raise _invalid([*loc, index, "type"], f"{part.type} parts are not taken; {SUPPORTED}")
    return UserContent(text="\n".join(texts), images=images)


def _decoded(data: str, loc: list[str | int]) -> bytes:
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise _invalid(loc, "must be base64 (no data: prefix, no line breaks)", "invalid image") from None


def check_image(image: ImageAttachment, loc: list[str | int], *, max_bytes: int) -> ImageAttachment:
    """The image as stored: inline bytes decoded, sized and sniffed; a URL checked to be https."""
    if image.data is None:
        problem = _url_problem(str(image.url))
        if problem is not None:
            raise _invalid(loc, problem, "invalid image")
        return image
    # Checked on the encoded length first: no decoding of a body that is certainly too large.
    if len(image.data) > (max_bytes * 4) // 3 + 4:
        raise _invalid(loc, f"an image may have at most {max_bytes} bytes (MAX_IMAGE_BYTES)", "image too large")
    raw = _decoded(image.data, loc)
    if len(raw) > max_bytes:
        raise _invalid(loc, f"an image may have at most {max_bytes} bytes (MAX_IMAGE_BYTES)", "image too large")
    found = sniff_image_type(raw)
    if found != image.mime_type:
        said = f"its bytes are {found}" if found else "its bytes are not JPEG, PNG or WebP"
        raise _invalid(loc, f"declared {image.mime_type}, but {said}", "invalid image")
    return image.model_copy(update={"size": len(raw)})


class ImagePolicy(BaseModel):
    """The image limits and which models see images (settings), with each stage's model (tasks.yaml)."""

    model_config = ConfigDict(frozen=True)

    max_bytes: int
    max_per_message: int
    image_models: frozenset[str]
    stage_models: Mapping[str, str]

    def blind_stage(self) -> BlindStage | None:
        """The first stage whose model does not accept images."""
        return next(
            (BlindStage(stage=s, model=m) for s, m in self.stage_models.items() if m not in self.image_models), None
        )


def image_policy(stages: Mapping[str, CallOptions], settings: Settings) -> ImagePolicy:
    return ImagePolicy(
        max_bytes=settings.max_image_bytes,
        max_per_message=settings.max_images_per_message,
        image_models=image_models(settings),
        stage_models={stage: options.model for stage, options in stages.items()},
    )


def check_message_images(messages: Sequence[UserMessage], policy: ImagePolicy) -> list[UserMessage]:
    """`messages` with their images checked (inline sizes recorded); 422 naming the limit or the model."""
    checked: list[UserMessage] = []
    for message in messages:
        if not message.images:
            checked.append(message)
            continue
        loc: list[str | int] = ["body", "messages", message.id, "images"]
        if len(message.images) > policy.max_per_message:
            raise _invalid(
                loc,
                f"a message may have at most {policy.max_per_message} images (MAX_IMAGES_PER_MESSAGE)",
                "too many images",
            )
        blind = policy.blind_stage()
        if blind is not None:
            raise _invalid(
                loc,
                f"the model {blind.model} (stage {blind.stage}) does not accept images; models that do: "
                f"{', '.join(sorted(policy.image_models)) or 'none configured'} (LLM_IMAGE_MODELS)",
                "images not supported by the model",
            )
        images = [check_image(image, [*loc, i], max_bytes=policy.max_bytes) for i, image in enumerate(message.images)]
        checked.append(message.model_copy(update={"images": images}))
    return checked
