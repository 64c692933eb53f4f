"""The demo model's summary of what a memory cut drops: extractive and deterministic, so remembering is measurable
offline. It keeps the previous summary's sentences and adds, in order, the sentences of the user's dropped turns
that state something about the user ("my ...", "I live/work/have ...", "我的/我住/我在..."), leaving out questions
and requests. The markers are the ones engine/conversation/summary.py writes (llm must not import conversation:
a test pins them equal); the test stub answers the summary task with this function too.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

SUMMARY_BLOCK_START = "<<<CONVERSATION_SUMMARY_JSON"
SUMMARY_BLOCK_END = "CONVERSATION_SUMMARY_JSON>>>"
NOTHING_STATED = "The user has stated no facts about themselves yet."

_SENTENCE_END = re.compile(r"(?<=[.!?。！？])\s*")
_STATES = re.compile(
    r"\b(?:my|our)\b|\bI (?:have|live|work|was born|moved|own|speak)\b|我的|我住|我在|我有|我叫|我是", re.IGNORECASE
)
_ASKS = re.compile(r"\b(?:please|could you|can you|would you|tell me)\b|请|能不能|吗", re.IGNORECASE)
_BLOCK = re.compile(re.escape(SUMMARY_BLOCK_START) + r"\n(.*)\n" + re.escape(SUMMARY_BLOCK_END))


def _sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def states_a_fact(sentence: str) -> bool:
    """A sentence in which the user says something about themselves, not a question or a request."""
    return not sentence.endswith(("?", "？")) and _STATES.search(sentence) is not None and not _ASKS.search(sentence)


def previous_summary(text: str) -> str | None:
    """The summary in a summary block (engine/conversation/summary.py: one escaped JSON string), if `text` has one."""
    match = _BLOCK.search(text)
    if match is None:
        return None
    value = json.loads(match.group(1))
    return value if isinstance(value, str) else None


def without_summary_block(text: str) -> str:
    """`text` after its summary block (the user's words joined to it), or all of it when it has none."""
    match = _BLOCK.search(text)
    return text if match is None else text[match.end() :].lstrip("\n")


def carried_summary(previous: str | None, said: Sequence[str]) -> str:
    """The previous summary's sentences, then the new fact sentences of `said` (the user's dropped words, oldest
    first) that it does not hold yet."""
    kept = [s for s in _sentences(previous or "") if s != NOTHING_STATED]
    known = set(kept)
    for text in said:
        for sentence in _sentences(text):
            if states_a_fact(sentence) and sentence not in known:
                kept.append(sentence)
                known.add(sentence)
    return " ".join(kept) if kept else NOTHING_STATED


def summary_of_request(user_contents: Sequence[str]) -> str:
    """The summary the task asks for, from the request's user messages (oldest first, the last one the task): the
    previous summary from its block, the user's words from the others."""
    texts = list(user_contents[:-1])
    previous = next((p for t in texts if (p := previous_summary(t)) is not None), None)
    return carried_summary(previous, [without_summary_block(t) for t in texts])
