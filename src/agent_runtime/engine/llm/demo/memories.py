"""The demo model's long-term memory: deterministic extraction (a few English and Chinese patterns) and the
recalled-memories block read back, so that its answers say what was recalled. The markers are the ones
engine/user_memories/block.py and extraction.py write (llm must not import memories: a test pins them equal).
"""

from __future__ import annotations

import json
import re

from pydantic import BaseModel, Field

RECALL_BLOCK_START = "<<<RECALLED_MEMORIES_JSON"
RECALL_BLOCK_END = "RECALLED_MEMORIES_JSON>>>"
TURN_BLOCK_START = "<<<MEMORY_TURN_JSON"
TURN_BLOCK_END = "MEMORY_TURN_JSON>>>"
EXTRACTION_TITLE = "MemoryExtraction"

_V = r"(?P<v>[^,.;!?，。；！？\n]{1,60}?)"
_END = r"\s*(?:[,.;!?，。；！？\n]|$)"
# (pattern, key, fact template): one key per kind of fact, so a later statement of that kind updates it.
_RULES: list[tuple[re.Pattern[str], str, str]] = [
    (re.compile(r"\bmy name is " + _V + _END, re.I), "name", "The user's name is {v}."),
    (re.compile(r"\bI (?:now )?(?:live|am living) in " + _V + _END, re.I), "home", "The user lives in {v}."),
    (re.compile(r"\bI (?:have )?(?:moved|relocated) to " + _V + _END, re.I), "home", "The user lives in {v}."),
    (re.compile(r"\bI(?:'m| am) allergic to " + _V + _END, re.I), "allergy:{v}", "The user is allergic to {v}."),
    (re.compile(r"\bI work as (?:an? )?" + _V + _END, re.I), "job", "The user works as {a}{v}."),
    (re.compile(r"\bmy favou?rite (?P<k>\w+) is " + _V + _END, re.I), "fav:{k}", "The user's favourite {k} is {v}."),
    (
        re.compile(r"\bmy (?P<k>cat|dog|pet)(?:'s name)? is (?:called |named )?" + _V + _END, re.I),
        "pet:{k}",
        "The user's {k} is called {v}.",
    ),
    (re.compile(r"我叫(?P<v>[^，。；！？,.!?\s]{1,20})"), "name", "用户叫{v}。"),
    (re.compile(r"我(?:现在)?住在(?P<v>[^，。；！？,.!?\s]{1,30})"), "home", "用户住在{v}。"),
    (re.compile(r"我(?:已经)?搬到了?(?P<v>[^，。；！？,.!?\s]{1,30})"), "home", "用户住在{v}。"),
    (re.compile(r"我对(?P<v>[^，。；！？,.!?\s]{1,20})过敏"), "allergy:{v}", "用户对{v}过敏。"),
    (re.compile(r"我(?:的工作)?是(?:一名|一个|一位)(?P<v>[^，。；！？,.!?\s]{1,20})"), "job", "用户是一名{v}。"),
    (
        re.compile(r"我最喜欢的(?P<k>[^，。；！？,.!?\s]{1,10}?)是(?P<v>[^，。；！？,.!?\s]{1,30})"),
        "fav:{k}",
        "用户最喜欢的{k}是{v}。",
    ),
    (re.compile(r"我的(?P<k>猫|狗|宠物)叫(?P<v>[^，。；！？,.!?\s]{1,20})"), "pet:{k}", "用户的{k}叫{v}。"),
]
# The prefix each key's facts share (how the demo finds the known fact a new one updates).
_PREFIX = re.compile(
    r"^(The user's name is|The user lives in|The user works as|The user's favourite \w+ is|"
    r"The user's \w+ is called|用户叫|用户住在|用户是一名|用户最喜欢的.{1,10}?是|用户的.{1,2}叫)"
)


class _Op(BaseModel):
    action: str
    memory_id: str | None = None
    fact: str | None = None


class _Extraction(BaseModel):
    operations: list[_Op] = Field(default_factory=list)


def _between(text: str, start: str, end: str) -> str | None:
    _, found, rest = text.partition(start + "\n")
    if not found:
        return None
    body, found, _ = rest.partition("\n" + end)
    return body if found else None


def recalled_facts(text: str) -> list[str]:
    """The facts of the recalled-memories block of a user message (none: [])."""
    body = _between(text, RECALL_BLOCK_START, RECALL_BLOCK_END)
    if body is None:
        return []
    values = json.loads(body)
    return [v for v in values if isinstance(v, str)] if isinstance(values, list) else []


def without_recall(text: str) -> str:
    """The user's words without the block (and its introduction) the run appended."""
    cut = text.find("\n\nLong-term memories recalled for this turn")
    return text if cut < 0 else text[:cut]


def _facts(user_text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for pattern, key, template in _RULES:
        for match in pattern.finditer(user_text):
            groups = {name: value.strip() for name, value in match.groupdict().items() if value}
            value = groups.get("v", "")
            if not value:
                continue
            article = (
                "" if value.lower().startswith(("a ", "an ")) else ("an " if value[0].lower() in "aeiou" else "a ")
            )
            found[key.format(**groups)] = template.format(a=article, **groups)
    return found


def _retractions(user_text: str) -> list[str]:
    """Words of facts the user takes back: "I no longer live in X", "我不再住在X" (matched against known facts)."""
    english = re.findall(r"\bI (?:no longer|don't|do not) (?:live in|like|work as) " + _V + _END, user_text, re.I)
    chinese = re.findall(r"我不再(?:住在|喜欢|是)(?P<v>[^，。；！？,.!?\s]{1,30})", user_text)
    return [v.strip() for v in [*english, *chinese] if v.strip()]


def extraction_answer(data_message: str) -> str:
    """The MemoryExtraction answer for the turn in `data_message` (the extraction call's user message)."""
    body = _between(data_message, TURN_BLOCK_START, TURN_BLOCK_END)
    payload = json.loads(body) if body else {}
    user_text = str(payload.get("user_message", ""))
    known = {str(m.get("id")): str(m.get("fact")) for m in payload.get("known_memories", []) if isinstance(m, dict)}
    operations: list[_Op] = []
    if forget_request(user_text) is not None:
        return json.dumps({"operations": []})  # the forget tool does it, once the user approves
    for fact in _facts(user_text).values():
        prefix = _PREFIX.match(fact)
        same = next((ref for ref, text in known.items() if prefix and text.startswith(prefix.group(1))), None)
        if same is not None and known[same] == fact:
            continue
        if same is not None:
            operations.append(_Op(action="update", memory_id=same, fact=fact))
        elif fact not in known.values():
            operations.append(_Op(action="add", fact=fact))
    for words in _retractions(user_text):
        operations += [_Op(action="delete", memory_id=ref) for ref, text in known.items() if words in text]
    return json.dumps(_Extraction(operations=operations).model_dump(mode="json", exclude_none=True), ensure_ascii=False)


_FORGET = re.compile(r"\bforget (?:that |about )?(?P<what>.+)|忘(?:记|掉)(?P<zh>.+)", re.I | re.S)


def forget_request(text: str) -> str | None:
    """What the user asks to forget ("forget that I live in Paris" -> "I live in Paris"), or None."""
    match = _FORGET.search(without_recall(text).split("\n\n", 1)[0])
    if match is None:
        return None
    what = (match.group("what") or match.group("zh") or "").strip().strip("\"'。.!")
    return what or None
