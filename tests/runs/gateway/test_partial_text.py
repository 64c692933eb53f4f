"""AssistantTextExtractor: the answer's text out of a stage's JSON while it is still being written."""

from __future__ import annotations

import json
import random

import pytest

from agent_runtime.engine.runs.gateway.partial_text import AssistantTextExtractor

TRICKY = 'Line one\nTab\there, "quoted" {braces} back\\slash, café, 你好, emoji 😀 end'


def _document(text: str, route: str = "DIRECT_EXECUTION") -> str:
    payload = {"route": route, "intent_summary": "chat", "assistant_text": text, "safety_flags": []}
    return json.dumps(payload)  # ASCII escapes: \n, \", \\, \u00e9, surrogate pairs for the emoji


def _pieces(document: str, sizes: list[int]) -> list[str]:
    pieces, start = [], 0
    for size in sizes:
        pieces.append(document[start : start + size])
        start += size
    return [*pieces, document[start:]] if start < len(document) else pieces


def _has_lone_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


@pytest.mark.parametrize("seed", range(20))
def test_any_chunking_yields_exactly_the_answer_in_order(seed: int) -> None:
    document = _document(TRICKY)
    rng = random.Random(seed)
    sizes = [1] * len(document) if seed == 0 else [rng.randint(1, 7) for _ in range(len(document))]
    extractor = AssistantTextExtractor(required_route="DIRECT_EXECUTION")
    outputs = [extractor.feed(piece) for piece in _pieces(document, sizes)]
    assert "".join(outputs) == TRICKY
    assert not any(_has_lone_surrogate(o) for o in outputs)


def test_text_streams_while_the_string_is_still_open() -> None:
    extractor = AssistantTextExtractor()
    assert extractor.feed('{"assistant_text": "Hel') == "Hel"
    assert extractor.feed("lo, wor") == "lo, wor"
    assert extractor.feed('ld", "response_metadata": {}}') == "ld"
    assert extractor.emitted == "Hello, world"


def test_a_prefix_before_the_object_is_skipped() -> None:
    extractor = AssistantTextExtractor()
    assert extractor.feed('```json\n{"assistant_text": "Hi') == "Hi"


def test_nothing_streams_on_another_route() -> None:
    extractor = AssistantTextExtractor(required_route="DIRECT_EXECUTION")
    document = _document("not for the user", route="NEEDS_EXECUTION")
    assert [extractor.feed(piece) for piece in _pieces(document, [5] * 40)] == [""] * len(_pieces(document, [5] * 40))
