"""HTTP endpoints of the app's own backend as tools (`http:` in `TOOLS_FILE`, engine/flow/tools/tools_file.py).

Each tool names its method, a URL template whose `{placeholders}` are arguments (percent-encoded into the path),
the arguments (sent as the query of a GET or DELETE, as a JSON body otherwise), headers (`${NAME}` reads the
environment at start-up: secrets stay out of the file), a timeout, the most bytes its answer may have, how many
calls may be in flight at once, and whether the user must approve each call (the run then ends as an interrupt,
as for `update_bio`). Every call carries who asks in `X-Agent-Identity`: a JWT the tool server verifies with
`TOOL_IDENTITY_SECRET` (engine/flow/tools/identity.py), never the user's own token. Whatever goes wrong (server
down, timeout, an error status, an answer too large or not JSON) is a tool result saying so: the run goes on.
"""

from __future__ import annotations

import json
import string
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import quote

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, JsonValue, create_model, model_validator

from agent_runtime.engine.flow.tools.base import Tool, ToolArgs, ToolError
from agent_runtime.engine.flow.tools.call_identity import IDEMPOTENCY_HEADER, idempotency_key
from agent_runtime.engine.flow.tools.identity import IDENTITY_HEADER, IdentitySigner
from agent_runtime.engine.profiles.models import UserAgentContext

TOOL_NAME_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"
_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ParameterSpec(_Strict):
    """One argument the model fills in: a JSON scalar, described for the model."""

    type: Literal["string", "integer", "number", "boolean"]
    description: str = Field(min_length=1, max_length=500)
    required: bool = True
    enum: list[str | int | float] | None = Field(default=None, min_length=1)
    max_length: int | None = Field(default=None, ge=1, description="Strings: the most characters.")
    minimum: float | None = None
    maximum: float | None = None


class HttpToolSpec(_Strict):
    name: str = Field(pattern=TOOL_NAME_PATTERN, description="The tool's name as the model sees it.")
    description: str = Field(min_length=1, max_length=1000)
    method: Literal["GET", "POST", "PUT", "PATCH", "DELETE"]
    url: str = Field(pattern=r"^https?://", description="`{name}` placeholders are arguments, percent-encoded.")
    parameters: dict[str, ParameterSpec] = Field(default_factory=dict)
    headers: dict[str, str] = Field(default_factory=dict, description="`${NAME}` is read from the environment.")
    timeout_seconds: float = Field(default=5.0, gt=0, le=60)
    max_result_bytes: int = Field(default=16_384, ge=1, le=1_048_576)
    max_concurrency: int = Field(default=10, ge=1, le=1000, description="Calls in flight at once; more wait.")
    requires_approval: bool = False
    idempotent: bool | None = Field(
        default=None,
        description="Calling it twice does what calling it once does (a run taken over after its process died calls "
        "it again when its result was not stored). Default: true for GET, false otherwise.",
    )

    @model_validator(mode="after")
    def _placeholders_are_parameters(self) -> HttpToolSpec:
        fields = [field for _, field, _, _ in string.Formatter().parse(self.url) if field is not None]
        unknown = sorted(set(fields) - set(self.parameters))
        if unknown:
            raise ValueError(f"url placeholders {unknown} are not parameters")
        optional = sorted(field for field in fields if not self.parameters[field].required)
        if optional:
            raise ValueError(f"url placeholders {optional} must be required parameters")
        ours = {IDENTITY_HEADER.lower(), IDEMPOTENCY_HEADER.lower()}
        reserved = [name for name in self.headers if name.lower() in ours]
        if reserved:
            raise ValueError(f"headers {IDENTITY_HEADER} and {IDEMPOTENCY_HEADER} are set by the server")
        return self


class HttpToolAnswer(BaseModel):
    """What the model gets from an HTTP tool: the status and the answer (JSON as it came, or text)."""

    status: int
    data: JsonValue


def _args_model(spec: HttpToolSpec) -> type[ToolArgs]:
    fields: dict[str, Any] = {}
    for name, parameter in spec.parameters.items():
        python_type: Any = _TYPES[parameter.type]
        if parameter.enum is not None:
            python_type = Literal[tuple(parameter.enum)]
        constraints = Field(
            default=... if parameter.required else None,
            description=parameter.description,
            max_length=parameter.max_length,
            ge=parameter.minimum,
            le=parameter.maximum,
        )
        fields[name] = (python_type if parameter.required else python_type | None, constraints)
    model_name = "".join(part.title() for part in spec.name.split("_")) + "Args"
    return create_model(model_name, __base__=ToolArgs, **fields)


class HttpTool(Tool[ToolArgs]):
    """One configured HTTP endpoint. `open()` before the first call, `aclose()` at shutdown (the app's lifespan)."""

    def __init__(self, spec: HttpToolSpec, signer: IdentitySigner) -> None:
        super().__init__(
            name=spec.name,
            description=spec.description,
            args_model=_args_model(spec),
            timeout_seconds=spec.timeout_seconds,
            idempotent=spec.idempotent if spec.idempotent is not None else spec.method == "GET",
        )
        self.spec = spec
        self._signer = signer
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            # Created on first use, on the app's loop; the connector's limit is the tool's share of sockets.
            connector = aiohttp.TCPConnector(limit=self.spec.max_concurrency)
            self._session = aiohttp.ClientSession(connector=connector, raise_for_status=False)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def execute(self, args: ToolArgs, ctx: UserAgentContext) -> BaseModel:
        values = args.model_dump(exclude_none=True)
        path_fields = {field for _, field, _, _ in string.Formatter().parse(self.spec.url) if field is not None}
        url = self.spec.url.format(**{name: quote(str(values[name]), safe="") for name in path_fields})
        rest = {name: value for name, value in values.items() if name not in path_fields}
        headers = {**self.spec.headers, IDENTITY_HEADER: self._signer.sign(self.name, ctx)}
        key = idempotency_key()
        if key is not None:
            headers[IDEMPOTENCY_HEADER] = key
        in_query = self.spec.method in ("GET", "DELETE")
        request_args: dict[str, Any] = {"params": _query(rest)} if in_query else {"json": rest}
        try:
            async with self._client().request(self.spec.method, url, headers=headers, **request_args) as response:
                body = await response.content.read(self.spec.max_result_bytes + 1)
                status = response.status
                content_type = response.content_type
        except aiohttp.ClientError as exc:
            raise ToolError(f"{self.name}: the tool's server could not be reached ({type(exc).__name__})") from None
        if len(body) > self.spec.max_result_bytes:
            raise ToolError(f"{self.name}: the answer is larger than {self.spec.max_result_bytes} bytes")
        if status >= 400:
            raise ToolError(f"{self.name}: the tool's server answered HTTP {status}")
        return HttpToolAnswer(status=status, data=_data(self.name, body, content_type))


def _query(values: Mapping[str, Any]) -> dict[str, str]:
    return {name: json.dumps(value) if isinstance(value, bool) else str(value) for name, value in values.items()}


def _data(name: str, body: bytes, content_type: str) -> JsonValue:
    try:
        text = body.decode()
    except UnicodeDecodeError:
        raise ToolError(f"{name}: the answer is not UTF-8 text") from None
    if content_type != "application/json":
        return text
    try:
        data: JsonValue = json.loads(text)
    except ValueError:
        raise ToolError(f"{name}: the answer is not valid JSON") from None
    return data
