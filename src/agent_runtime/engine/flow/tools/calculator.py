"""A safe arithmetic evaluator over Python's `ast`; nothing is ever passed to eval/exec.

Numbers are `Decimal`, not float: a user asking for 0.1 + 0.2 expects 0.3, and results are exact for the
sums and products people ask a chat assistant for. `//` and `%` use floored semantics (as Python's ints),
`round` rounds half up (as a pocket calculator). Results are returned as text so no digit is lost in JSON.

Resource limits: the expression is at most 200 characters, exponents at most 1000 in magnitude, and the
decimal context keeps 28 significant digits and traps overflow at 1e101 (magnitudes under about 1e-127
become 0), so inputs such as 9**9**9 fail fast instead of burning CPU or memory. Those bounds are also why
evaluating inline on the event loop is fine: a tool timeout could not interrupt CPU-bound code anyway.
"""

from __future__ import annotations

import ast
import decimal
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_HALF_UP, Decimal

from pydantic import BaseModel, Field

from agent_runtime.engine.flow.tools.base import Tool, ToolArgs, ToolError
from agent_runtime.engine.profiles.models import UserAgentContext

MAX_EXPRESSION_CHARS = 200
MAX_EXPONENT = 1000
MAX_ROUND_DIGITS = 20

_CONTEXT = decimal.Context(
    prec=28,
    rounding=decimal.ROUND_HALF_EVEN,
    Emax=100,
    Emin=-100,
    traps=[decimal.Overflow, decimal.DivisionByZero, decimal.InvalidOperation],
)


class CalculatorArgs(ToolArgs):
    expression: str = Field(
        min_length=1,
        max_length=MAX_EXPRESSION_CHARS,
        description="Arithmetic expression: numbers, + - * / // % **, parentheses, sqrt(x), abs(x), "
        "round(x) or round(x, digits), floor(x), ceil(x). Example: (12.5 + 7) * 3 / sqrt(16)",
    )


class CalculatorResult(BaseModel):
    expression: str
    result: str


def _floor_div(a: Decimal, b: Decimal) -> Decimal:
    # Decimal's // truncates toward zero; step down when inexact with opposite signs so -7 // 2 == -4, as in Python.
    quotient = _CONTEXT.divide_int(a, b)
    if _CONTEXT.remainder(a, b) and (a < 0) != (b < 0):
        return _CONTEXT.subtract(quotient, 1)
    return quotient


def _floor_mod(a: Decimal, b: Decimal) -> Decimal:
    return _CONTEXT.subtract(a, _CONTEXT.multiply(b, _floor_div(a, b)))


def _power(base: Decimal, exponent: Decimal) -> Decimal:
    if abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"exponent too large (limit {MAX_EXPONENT})")
    # The decimal module answers 0 ** -1 with Infinity instead of signalling DivisionByZero.
    if not base and exponent < 0:
        raise ToolError("division by zero")
    return _CONTEXT.power(base, exponent)


def _round(value: Decimal, digits: Decimal = Decimal(0)) -> Decimal:
    if digits != digits.to_integral_value() or not 0 <= digits <= MAX_ROUND_DIGITS:
        raise ToolError(f"round digits must be an integer from 0 to {MAX_ROUND_DIGITS}")
    return value.quantize(Decimal(1).scaleb(-int(digits)), rounding=ROUND_HALF_UP, context=_CONTEXT)


_BINARY: dict[type[ast.operator], Callable[[Decimal, Decimal], Decimal]] = {
    ast.Add: _CONTEXT.add,
    ast.Sub: _CONTEXT.subtract,
    ast.Mult: _CONTEXT.multiply,
    ast.Div: _CONTEXT.divide,
    ast.FloorDiv: _floor_div,
    ast.Mod: _floor_mod,
    ast.Pow: _power,
}
_UNARY: dict[type[ast.unaryop], Callable[[Decimal], Decimal]] = {
    ast.USub: _CONTEXT.minus,
    ast.UAdd: _CONTEXT.plus,
}


@dataclass(frozen=True)
class _Function:
    apply: Callable[..., Decimal]
    arity: range


_FUNCTIONS: dict[str, _Function] = {
    "sqrt": _Function(_CONTEXT.sqrt, range(1, 2)),
    "abs": _Function(_CONTEXT.abs, range(1, 2)),
    "round": _Function(_round, range(1, 3)),
    "floor": _Function(lambda x: x.to_integral_value(rounding=ROUND_FLOOR, context=_CONTEXT), range(1, 2)),
    "ceil": _Function(lambda x: x.to_integral_value(rounding=ROUND_CEILING, context=_CONTEXT), range(1, 2)),
}


def _number(value: object) -> Decimal:
    # bool is an int subclass: True + True must not be accepted as 2.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ToolError(f"unsupported constant {value!r}")
    # A literal such as 1e999 is already float infinity when the parser hands it over.
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("result too large (limit 1e101)")
    # repr gives the shortest text of a float literal, so 0.1 becomes Decimal("0.1"), not 0.1000000000000000055...
    # Unary plus applies the context, so an over-large literal overflows here like any other value.
    return _CONTEXT.plus(Decimal(repr(value)))


def _call(node: ast.Call) -> Decimal:
    if not isinstance(node.func, ast.Name) or node.func.id not in _FUNCTIONS:
        raise ToolError(f"unsupported function {ast.unparse(node.func)!r}")
    function = _FUNCTIONS[node.func.id]
    if node.keywords or len(node.args) not in function.arity:
        raise ToolError(f"wrong number of arguments for {node.func.id}()")
    return function.apply(*(_evaluate(arg) for arg in node.args))


def _evaluate(node: ast.expr) -> Decimal:
    if isinstance(node, ast.Constant):
        return _number(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return _BINARY[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.Call):
        return _call(node)
    if isinstance(node, ast.Name):
        raise ToolError(f"unknown name {node.id!r}")
    raise ToolError(f"unsupported syntax: {type(node).__name__}")


def _format(value: Decimal) -> str:
    text = format(value.normalize(_CONTEXT), "f")
    return "0" if text == "-0" else text


def evaluate_expression(expression: str) -> str:
    """Evaluate an arithmetic expression; raise ToolError with a message for the model on any failure."""
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"expression longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except (SyntaxError, ValueError) as exc:
        raise ToolError("invalid expression syntax") from exc
    try:
        return _format(_evaluate(tree.body))
    except ZeroDivisionError as exc:  # decimal.DivisionByZero and 0/0 (DivisionUndefined) are both subclasses
        raise ToolError("division by zero") from exc
    except decimal.Overflow as exc:
        raise ToolError("result too large (limit 1e101)") from exc
    except decimal.InvalidOperation as exc:
        raise ToolError(
            "undefined or unrepresentable result (such as 0/0, the square root of a negative number, "
            "or an integer result of more than 28 digits)"
        ) from exc
    except RecursionError as exc:
        raise ToolError("expression nested too deeply") from exc


class CalculatorTool(Tool[CalculatorArgs]):
    def __init__(self) -> None:
        super().__init__(
            name="calculator",
            description="Evaluate an arithmetic expression exactly (decimal arithmetic) and return the result.",
            args_model=CalculatorArgs,
            idempotent=True,
        )

    async def execute(self, args: CalculatorArgs, ctx: UserAgentContext) -> CalculatorResult:
        return CalculatorResult(expression=args.expression, result=evaluate_expression(args.expression))
