"""Repair turns for answers that miss their JSON contract (the stages' and the memory summary's): one wording."""

from __future__ import annotations

from functools import cache

from pydantic import BaseModel, ValidationError

_REPAIR_ERROR_CHARS = 600

# The finish_reason of an answer cut at max_tokens.
CUT_AT_OUTPUT_LIMIT = "length"


def strip_code_fence(content: str) -> str:
    text = content.strip()
    if text.startswith("```") and text.endswith("```"):
        text = text[3:-3]
        if text.startswith("json"):
            text = text[4:]
    return text.strip()


@cache
def schema_title(contract: type[BaseModel]) -> str:
    """The title of the contract's JSON schema, as the prompt shows it (the system prompt holds every stage's)."""
    return str(contract.model_json_schema().get("title", contract.__name__))


def unusable_answer(content: str, finish_reason: str | None, error: ValidationError) -> str:
    """What was wrong with a final answer that failed its contract, said to the model in the repair turn."""
    # Cut first: a thinking model can spend the whole output budget before it writes anything.
    if finish_reason == CUT_AT_OUTPUT_LIMIT:
        return "it was cut off at the output limit, so the JSON is incomplete; keep the answer shorter"
    if not content.strip():
        # DeepSeek's JSON mode answers spaces in place of output that is not JSON.
        return "it was blank"
    problems = "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or '(root)'}: {item['msg']}" for item in error.errors()
    )
    return problems[:_REPAIR_ERROR_CHARS]


def repair_text(problem: str, contract: type[BaseModel], *, where: str) -> str:
    """The repair turn. The contract is named by its schema's title: a system prompt may hold several schemas;
    `where` says where it is (e.g. "in the system prompt")."""
    title = schema_title(contract)
    return (
        f"Your previous answer could not be used: {problem}. "
        f"Answer again with only the {title} JSON object (the schema titled {title} {where})."
    )
