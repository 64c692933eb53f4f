"""What the offline demo model answers: deterministic, labelled as a demo, valid for the three agent stages.

The stage is recognised by the last user message, as the flow writes it (engine/flow/prompt.py): a stage request
starts with `Stage: <name>`, a repair turn or the summary task names its contract, and the user's own turn is the
intent stage's request, closed by the line naming its contract (or, from a caller that sends no such line, when a
system prompt holds the stages). The user's words are the latest user message that is neither a stage request nor a
repair, without that line.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Literal

from pydantic import BaseModel, Field

from agent_runtime.engine.llm.demo.extractive import summary_of_request
from agent_runtime.engine.llm.demo.memories import (
    EXTRACTION_TITLE,
    extraction_answer,
    forget_request,
    recalled_facts,
    without_recall,
)
from agent_runtime.engine.llm.models import ToolSchema, WireFunctionCall, WireMessage, WireToolCall

DEMO_PREFIX = "[demo model]"
# How the flow starts a stage's request (engine/flow/prompt.py; llm must not import flow).
STAGE_REQUEST_PREFIX = "Stage: "
# How the flow's repair turns start (engine/flow/crewai/wire.py).
REPAIR_PREFIX = "Your previous answer could not be used"
# The line that closes the intent stage's request, after the user's words (engine/flow/prompt.py CONTRACT_LINE).
# The demo provider writes a message's images after its text, so the line is not always last.
_CONTRACT_LINE = re.compile(r"\s*Answer as the \w+ stage: only the (\w+) JSON object\.")
STAGE_CONTRACT_OF = {"intent": "IntentResult", "execution": "ExecutionResult", "organization": "OrganizationResult"}
STAGE_TITLES = ("OrganizationResult", "ExecutionResult", "IntentResult")  # later stages win a tie
# The chat memory's summary task (engine/conversation/summary.py), recognised like a stage by its schema title.
SUMMARY_TITLE = "ConversationSummary"
_SCHEMA_TITLE = re.compile(r'"title"\s*:\s*"(IntentResult|ExecutionResult|OrganizationResult|ConversationSummary)"')
_EXPRESSION = re.compile(r"\(*\d[\d\s.+\-*/×÷%()^]*")
_HAS_OPERATOR = re.compile(r"\d\s*\)?\s*(?:\*\*|//|[-+*/×÷%^])\s*\(?\s*\d")
_JSON_STRING = r'("(?:[^"\\]|\\.)*")'
_QUOTED_USER_TEXT = (
    re.compile(r"latest message[^\n:\"{}]*:\s*" + _JSON_STRING, re.IGNORECASE),
    re.compile(r"\buser\b[^\n:\"{}]*:\s*" + _JSON_STRING, re.IGNORECASE),
)
_TIME_WORDS = re.compile(r"\b(time|date)\b|几点|时间|日期", re.IGNORECASE)
# "set my bio to: ...", "change my bio to ...", "update my bio: ..." (the new bio is the rest of the line).
_NEW_BIO = re.compile(r"\bbio\b\s*(?:to\b)?\s*:?\s*(?P<bio>\S.*)", re.IGNORECASE)
_BIO_VERB = re.compile(r"\b(set|change|update|replace|make)\b", re.IGNORECASE)
_TOOL_WORD = re.compile(r"\btools?\b", re.IGNORECASE)


class DemoAnswer(BaseModel):
    content: str = ""
    tool_calls: list[WireToolCall] = Field(default_factory=list)
    # Like a thinking model's reasoning_content, so reasoning can be seen (and tested) offline.
    reasoning: str = ""


# The stage contracts as the demo writes them (engine/flow validates them; llm must not import flow).
class _Intent(BaseModel):
    # Field order as in the flow's contract: the runner streams assistant_text out of the partial JSON.
    route: Literal["DIRECT_EXECUTION", "NEEDS_EXECUTION"]
    assistant_text: str | None = None
    intent_summary: str
    execution_brief: str | None = None
    safety_flags: list[str] = Field(default_factory=list)


class _ToolOutput(BaseModel):
    tool_call_id: str | None
    name: str | None
    output: str | None


class _ExecutionData(BaseModel):
    tool_results: list[_ToolOutput] = Field(default_factory=list)


class _Execution(BaseModel):
    status: Literal["SUCCESS", "PARTIAL", "FAILED"]
    execution_summary: str
    execution_data: _ExecutionData
    report_brief: str
    error_message: str | None = None


class _OrganizationMetadata(BaseModel):
    demo: bool = True


class _Organization(BaseModel):
    assistant_text: str
    response_metadata: _OrganizationMetadata = Field(default_factory=_OrganizationMetadata)


class _PlainJSON(BaseModel):
    assistant_text: str


class _Summary(BaseModel):
    summary: str


def _is_stage_request(content: str) -> bool:
    return content.startswith(STAGE_REQUEST_PREFIX)


def detect_stage(messages: list[WireMessage]) -> str | None:
    """The contract the last user message asks for: a stage request names its stage (`Stage: <name>`), a repair
    or the summary task names its contract; the user's own turn is the intent stage's request (flow/prompt.py)."""
    last = next((m.content for m in reversed(messages) if m.role == "user" and m.content), None)
    if last is None:
        return None
    if _is_stage_request(last):
        return STAGE_CONTRACT_OF.get(last.split("\n", 1)[0].removeprefix(STAGE_REQUEST_PREFIX).strip())
    if (named := _CONTRACT_LINE.findall(last)) and named[-1] in STAGE_TITLES:
        return str(named[-1])
    if match := _SCHEMA_TITLE.search(last):
        return match.group(1)
    for title in STAGE_TITLES:
        if title in last:
            return title
    # The user's own turn is the intent stage's request, when a system prompt holds the stages.
    if any(m.role == "system" and m.content and "IntentResult" in m.content for m in messages):
        return "IntentResult"
    return None


def _strip_json_blocks(text: str) -> str:
    kept: list[str] = []
    depth = 0
    for char in text:
        if char == "{":
            depth += 1
        elif char == "}" and depth:
            depth -= 1
        elif depth == 0:
            kept.append(char)
    return "".join(kept)


def _quoted_user_text(text: str) -> str | None:
    for pattern in _QUOTED_USER_TEXT:
        if match := pattern.search(text):
            value = json.loads(match.group(1))
            return value if isinstance(value, str) else None
    return None


def user_request(messages: list[WireMessage]) -> str:
    """The user's words: the last user message that is neither a stage request nor a repair turn; words a template
    quotes are taken out of it, and a schema's wording is cut away."""
    users = [m.content for m in messages if m.role == "user" and m.content]
    turns = [text for text in users if not _is_stage_request(text) and not text.startswith(REPAIR_PREFIX)]
    if not turns:
        return ""
    last = without_recall(_CONTRACT_LINE.sub("", turns[-1]))
    quoted = _quoted_user_text(last)
    if quoted is not None:
        return quoted
    return _strip_json_blocks(last) if any(title in last for title in STAGE_TITLES) else last


def find_expression(text: str) -> str | None:
    for match in _EXPRESSION.finditer(text):
        expression = (
            str(match.group(0)).strip().rstrip("+-*/×÷%^ ").replace("×", "*").replace("÷", "/").replace("^", "**")
        )
        if _HAS_OPERATOR.search(expression):
            return expression
    return None


def asks_for_time(text: str) -> bool:
    return _TIME_WORDS.search(text) is not None


def new_bio(text: str) -> str | None:
    """The bio the user asks for ("set my bio to: Kayaker"), or None when the request is not one."""
    first_line = text.split("\n\n", 1)[0]  # not the client context block the run appends
    match = _NEW_BIO.search(first_line) if _BIO_VERB.search(first_line) else None
    return match.group("bio").strip().strip("\"'") if match else None


def asks_for_a_tool(text: str) -> bool:
    return _TOOL_WORD.search(text) is not None


def _short(text: str, limit: int = 80) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def _json(payload: BaseModel) -> DemoAnswer:
    return DemoAnswer(content=json.dumps(payload.model_dump(mode="json"), ensure_ascii=False))


def _plain_reply(request: str) -> str:
    said = f' You said: "{_short(request)}"' if request.strip() else ""
    return f"{DEMO_PREFIX} This is the offline demo model; no language model provider is configured.{said}"


def _remembered(messages: list[WireMessage]) -> str:
    """What the turn was shown from long-term memory, said in the reply (the demo's answers show recall)."""
    last = next((m.content for m in reversed(messages) if m.role == "user" and m.content), "")
    facts = recalled_facts(last)
    return f" I remember: {' '.join(facts)}" if facts else ""


def intent_answer(messages: list[WireMessage]) -> DemoAnswer:
    answer = _intent_answer(user_request(messages), _remembered(messages))
    route = "a tool is needed" if '"NEEDS_EXECUTION"' in answer.content else "I can answer directly"
    reasoning = f"{DEMO_PREFIX} Reading the request: {_short(user_request(messages), 60)}. {route.capitalize()}."
    return answer.model_copy(update={"reasoning": reasoning})


def _intent_answer(request: str, remembered: str = "") -> DemoAnswer:
    expression = find_expression(request)
    if (forget := forget_request(request)) is not None:
        summary = "Forget a memory"
        brief = (
            f"Forget what the user asks to forget with the forget_memory tool: {json.dumps(forget, ensure_ascii=False)}"
        )
    elif expression is not None:
        summary, brief = f"Calculate {expression}", f"Evaluate {expression} with the calculator tool."
    elif (bio := new_bio(request)) is not None:
        summary, brief = "Update the profile bio", f"Set the user's bio to {json.dumps(bio, ensure_ascii=False)}."
    elif asks_for_time(request):
        summary, brief = "Tell the current date and time", "Look up the current time with the current_time tool."
    elif asks_for_a_tool(request):
        summary, brief = "Use a tool the app offers", f"Call the tool the user names in: {_short(request, 120)}"
    else:
        return _json(
            _Intent(
                route="DIRECT_EXECUTION",
                intent_summary=f"{DEMO_PREFIX} Small talk: {_short(request, 60)}",
                assistant_text=_plain_reply(request) + remembered,
            )
        )
    return _json(_Intent(route="NEEDS_EXECUTION", intent_summary=f"{DEMO_PREFIX} {summary}", execution_brief=brief))


def _tool_call(tool: ToolSchema, arguments: dict[str, str], salt: int) -> WireToolCall:
    encoded = json.dumps(arguments, ensure_ascii=False)
    digest = hashlib.sha256(f"{tool.function.name}:{encoded}:{salt}".encode()).hexdigest()[:16]
    return WireToolCall(id=f"call_demo_{digest}", function=WireFunctionCall(name=tool.function.name, arguments=encoded))


def _named_tool_arguments(tool: ToolSchema, request: str) -> dict[str, str]:
    # A tool the user named: each required string argument gets the user's words.
    parameters = tool.function.parameters
    required = parameters.get("required") or []
    properties = parameters.get("properties") or {}
    return {name: _short(request, 200) for name in required if (properties.get(name) or {}).get("type") == "string"}


def choose_tool_call(tools: list[ToolSchema], request: str, salt: int) -> WireToolCall | None:
    forget = forget_request(request)
    if forget is not None:
        tool = next((t for t in tools if "forget" in t.function.name), None)
        if tool is not None:
            return _tool_call(tool, {"what": forget}, salt)
    expression = find_expression(request)
    bio = new_bio(request)
    for tool in tools:
        name = tool.function.name.lower()
        if expression is not None and "calc" in name:
            properties = tool.function.parameters.get("properties") or {}
            argument = next(iter(properties), "expression")
            return _tool_call(tool, {argument: expression}, salt)
        if expression is None and bio is None and asks_for_time(request) and "time" in name:
            return _tool_call(tool, {}, salt)
        if expression is None and bio is not None and "bio" in name:
            return _tool_call(tool, {"bio": bio}, salt)
    for tool in tools:
        if re.search(rf"\b{re.escape(tool.function.name)}\b", request):
            return _tool_call(tool, _named_tool_arguments(tool, request), salt)
    return None


def _tool_names(messages: list[WireMessage]) -> dict[str, str]:
    return {call.id: call.function.name for m in messages for call in (m.tool_calls or [])}


def _this_stage(messages: list[WireMessage]) -> list[WireMessage]:
    """The messages after the stage's request: the history before it holds earlier turns' tool results."""
    starts = [i for i, m in enumerate(messages) if m.role == "user" and m.content and _is_stage_request(m.content)]
    return messages[starts[-1] + 1 :] if starts else messages


def execution_answer(messages: list[WireMessage], tools: list[ToolSchema]) -> DemoAnswer:
    results = [m for m in _this_stage(messages) if m.role == "tool"]
    request = user_request(messages)
    if tools and not results:
        call = choose_tool_call(tools, request, salt=len(messages))
        if call is not None:
            return DemoAnswer(tool_calls=[call])
    if not results:
        return _json(
            _Execution(
                status="PARTIAL",
                execution_summary=f"{DEMO_PREFIX} No tool matched the request, nothing was run.",
                execution_data=_ExecutionData(),
                report_brief=f"Say that the demo model could not run a tool for: {_short(request, 60)}",
            )
        )
    names = _tool_names(messages)
    outputs = [
        _ToolOutput(tool_call_id=m.tool_call_id, name=names.get(m.tool_call_id or ""), output=m.content)
        for m in results
    ]
    errors = [o.output or "" for o in outputs if '"error"' in (o.output or "")]
    described = "; ".join(f"{o.name or 'tool'} returned {_short(o.output or '', 60)}" for o in outputs)
    status: Literal["SUCCESS", "PARTIAL", "FAILED"] = "SUCCESS"
    if errors:
        status = "FAILED" if len(errors) == len(outputs) else "PARTIAL"
    return _json(
        _Execution(
            status=status,
            execution_summary=f"{DEMO_PREFIX} {described}",
            execution_data=_ExecutionData(tool_results=outputs),
            report_brief=f"Report the tool results to the user: {described}",
            error_message="; ".join(errors) or None,
        )
    )


def _json_string_field(messages: list[WireMessage], field: str) -> str | None:
    pattern = re.compile(rf'"{field}"\s*:\s*' + _JSON_STRING)
    for message in reversed(messages):
        if message.content and (match := pattern.search(message.content)):
            value = json.loads(match.group(1))
            return value if isinstance(value, str) else None
    return None


def organization_answer(messages: list[WireMessage]) -> DemoAnswer:
    summary = _json_string_field(messages, "execution_summary")
    if summary is None:
        report = _short(_strip_json_blocks(user_request(messages)), 160)
        text = f"{DEMO_PREFIX} Here is what was done: {report}"
    else:
        text = f"{DEMO_PREFIX} {summary.removeprefix(DEMO_PREFIX).strip()}"
    return _json(_Organization(assistant_text=text))


def summary_answer(messages: list[WireMessage]) -> DemoAnswer:
    """An extractive summary (demo/extractive.py): the previous one carried forward, and what the user stated."""
    said = [_CONTRACT_LINE.sub("", m.content) for m in messages if m.role == "user" and m.content]
    return _json(_Summary(summary=summary_of_request(said)))


def demo_answer(messages: list[WireMessage], tools: list[ToolSchema], json_mode: bool) -> DemoAnswer:
    """`tools`: the tools the model may call now (none when the request's tool_choice is "none")."""
    if any(m.role == "system" and m.content and EXTRACTION_TITLE in m.content for m in messages):
        return DemoAnswer(content=extraction_answer(messages[-1].content or ""))
    stage = detect_stage(messages)
    if stage == SUMMARY_TITLE:
        return summary_answer(messages)
    if stage == "IntentResult":
        return intent_answer(messages)
    if stage == "ExecutionResult":
        return execution_answer(messages, tools)
    if stage == "OrganizationResult":
        return organization_answer(messages)
    reply = _plain_reply(user_request(messages))
    return _json(_PlainJSON(assistant_text=reply)) if json_mode else DemoAnswer(content=reply)
