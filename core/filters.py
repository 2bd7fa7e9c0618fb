"""The subscription filter language: a CEL expression over a message's headers.

A subscription's ``filter`` is a `CEL <https://cel.dev>`_ expression (the language of Pub/Sub
filters and Kubernetes validation rules) that must give ``true`` or ``false``. It sees:

- ``headers`` — ``map(string, string)``: the message's stored headers, names in lower case,
  values decoded as UTF-8 (bad bytes become U+FFFD); a name sent twice gives the values joined
  with ``", "``. It holds ``x-message-id``, ``x-produced-at``, ``x-group-id``,
  ``content-type``, every carried ``x-`` header, and a CloudEvent's ``ce-`` attributes
  (:mod:`core.cloudevents`; values as stored, percent-encoded where the binding says);
- ``group`` — the group id, ``""`` when the message has none;
- ``topic`` — ``"project/topic"``;
- ``content_type`` — the content type, ``""`` when none;
- ``body`` — the payload parsed as a JSON object (:func:`parse_body`), read only by filters
  that name it.

For example::

    headers["x-region"] == "eu"
    headers["x-region"] in ["eu", "us"] && "x-priority" in headers
    headers["x-region"].startsWith("eu-") || headers["x-region"].endsWith("-1")
    !(group == "g1") && content_type == "application/json"
    topic == "shop/orders" || headers["x-kind"] != "test"
    body.region == "eu" && body.amount > 100
    has(body.customer) && has(body.customer.vip)

``compile_filter`` checks an expression once, when a subscription is created or updated: syntax,
unknown names and functions, operand types (``headers["x"] == 1`` is refused), that it gives a
bool, that no header name is written in upper case (``headers["X-Region"]`` would never be
found), and that no comprehension (``all``, ``exists``, ``exists_one``, ``map``, ``filter``)
nests inside another. A refusal is a
:class:`FilterError` (422) with the line and column of the first problem.

Evaluation never raises. :meth:`Filter.matches` gives a :class:`FilterResult`: MATCH, NO_MATCH
or ERROR. ERROR is what CEL calls an evaluation error; the usual one is a missing header,
``headers["x-region"] == "eu"`` on a message without ``x-region``. Such a message is treated as
filtered out (it is committed and never pushed) and counted apart, as ``filter_error``, so a
filter that reads a header most messages lack shows up. CEL's ``||`` and ``&&`` absorb errors
when the other side decides (``!("x-region" in headers) || headers["x-region"] == "eu"`` is
never an error). Write ``"x-region" in headers && ...`` to test for a header first.

Filters over the body: a filter that names ``body`` parses the payload as JSON whatever its
content type (a producer may omit it). The payload must be a JSON object of at most
:data:`MAX_BODY_BYTES` (256 KiB) nesting at most :data:`MAX_BODY_DEPTH` (32) levels, with no
``NaN`` or ``Infinity``; integers past CEL's 64 bits become doubles. Any other payload (not
UTF-8, not JSON, a JSON array or scalar, too large, too deep) is not evaluated at all: the
filter's result is ERROR with the reason (``body: not JSON …``), so the message is filtered
out, counted as a ``filter_error`` and its ``filtered`` audit event names the reason; it is
never retried. This holds even if another branch of the expression (``headers[...] == ...
|| body...``) could have matched without the body: a filter that names ``body`` sees JSON
objects only. JSON values map to CEL's: object → map, array → list, string, number (int when
written without a fraction or exponent, else double; ``body.amount > 100`` compares either),
true/false, null. A field a message lacks is an ERROR as for headers, and so is
``has(body.a.b)`` when ``a`` itself is absent: write ``has(body.a) && has(body.a.b)``.

Cost: the checks above bound one evaluation to the length of the expression (4096 characters)
times the size of the lists it walks; the runtime also stops any evaluation past 10,000
comprehension iterations (an ERROR), and CEL's ``matches()`` uses RE2, linear in its input.
``bench/filters.py`` measures it: 5 to 10 microseconds per message with seven headers (about
5 of them fixed cost of the runtime, 1 to build ``headers``), 10 to 50 times a hand-written
Python function; compiling takes about 0.1 ms. A body filter adds the parse and CEL's
conversion of the parsed object, which grow with the body: see docs/receiving.md for the
figures at 1 KiB and 64 KiB (``bench/filters.py``).

Library: ``cel-expr-python``, the CEL team's own binding of cel-cpp, chosen over ``cel-python``
(celpy, pure Python) and ``common-expression-language`` (a binding of the Rust ``cel`` crate).
It is the only one of the three with CEL's type checker (unknown names and wrong operand types
are refused at create time, with their position, instead of failing on every message), it runs
the CEL conformance suite, returns evaluation errors as values, limits iterations, and needs no
other package. Per message it is about 3 times faster than the Rust binding (whose conversion
of Python strings dominates) and 30 to 60 times faster than celpy. The other two also lack an
iteration limit (a nested comprehension held the GIL for 0.6 s in the Rust binding), the Rust
``size()`` counts UTF-8 bytes instead of code points, and celpy raises Python's recursion
limit process-wide. Its risk is youth (0.1.x): pin it below 0.2, and never ask it for the
value of a ``null`` result, which drops a reference to ``None`` it does not own (fatal on
Python 3.11 in the end); a filter is type-checked as bool, so it never gives one.

A :class:`Filter` is immutable and may be shared between threads and subscriptions;
``compile_filter`` keeps the last 4096 compiled ones, so a worker that recompiles on every
settings change pays once per distinct expression.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from cel_expr_python import cel  # type: ignore[import-untyped]  # .pyi, no py.typed

from .errors import ValidationFailed

MAX_FILTER_LENGTH = 4_096
MAX_BODY_BYTES = 256 * 1024
MAX_BODY_DEPTH = 32
VARIABLES = ("headers", "group", "topic", "content_type", "body")
MACROS = ("all", "exists", "exists_one", "map", "filter")

# One CEL token that may hold a quote: a comment, a raw string or a string (bytes or text).
_LITERAL = re.compile(
    r"//[^\n]*"
    r"|[bB]?[rR][bB]?(?:\"\"\"[\s\S]*?\"\"\"|'''[\s\S]*?'''|\"[^\"\n]*\"|'[^'\n]*')"
    r"|(?P<p>[bB]?)(?P<q>\"\"\"|'''|\"|')(?P<body>(?:\\[\s\S]|(?!(?P=q))[^\\])*)(?P=q)"
)
_MACRO_CALL = re.compile(r"\.\s*(?P<name>" + "|".join(MACROS) + r")\s*\(")
_HEADERS_KEY = re.compile(r"(?<![\w.])headers\s*\[\s*$")
_IN_HEADERS = re.compile(r"\s*in\s+headers\b")
_DIAGNOSTIC = re.compile(r"ERROR: <input>:(-?\d+):(-?\d+): ([^\n]*)")
_OPERATOR = re.compile(r"'(?:_([^'_]+)_|([!-])_|@(in))'")
_NAMES_BODY = re.compile(r"(?<![\w.])body\b")
_INT64 = (-(2**63), 2**63 - 1)
_UNDECLARED = re.compile(r"undeclared reference to '([^']*)' \(in container ''\)")


class FilterOutcome(StrEnum):
    """What a filter says of one message. ERROR counts as filtered out, apart."""

    MATCH = "match"
    NO_MATCH = "no_match"
    ERROR = "filter_error"


@dataclass(frozen=True, slots=True)
class FilterResult:
    """The outcome for one message, and CEL's reason when it is ERROR."""

    outcome: FilterOutcome
    error: str | None = None

    @property
    def matched(self) -> bool:
        return self.outcome is FilterOutcome.MATCH


MATCHED = FilterResult(FilterOutcome.MATCH)
NOT_MATCHED = FilterResult(FilterOutcome.NO_MATCH)


@dataclass(frozen=True, slots=True)
class FilterPosition:
    """Where a problem is: line and column from 1 (in characters), offset from 0."""

    line: int
    column: int
    offset: int

    @classmethod
    def at_offset(cls, expression: str, offset: int) -> FilterPosition:
        line = expression.count("\n", 0, offset) + 1
        return cls(line, offset - (expression.rfind("\n", 0, offset) + 1) + 1, offset)

    @classmethod
    def at(cls, expression: str, line: int, column: int) -> FilterPosition:
        starts = [0] + [i + 1 for i, ch in enumerate(expression) if ch == "\n"]
        offset = starts[min(line, len(starts)) - 1] + column - 1
        return cls(line, column, offset)

    def __str__(self) -> str:
        return f"line {self.line}, column {self.column}"


class FilterError(ValidationFailed):
    """An expression that is not a valid filter: what is wrong and where (None: unknown)."""

    def __init__(self, problem: str, position: FilterPosition | None) -> None:
        message = f"{position}: {problem}" if position else problem
        super().__init__(message, details={"fields": [{"field": "filter", "problem": message}]})
        self.problem = problem
        self.position = position


class Body:
    """A payload as a body filter sees it: the JSON object (``value``), or why there is none
    (``refusal``).

    A Body belongs to one message of one topic. The first evaluation on it converts the object
    into CEL's values (about as long as the parse) and keeps them in an activation, with that
    message's other variables; every later evaluation on it, of any filter, reuses them (a few
    microseconds). So a Body shared by the subscriptions that read one message parses and
    converts it once for all of them."""

    __slots__ = ("_activation", "refusal", "value")

    def __init__(self, value: dict[str, object] | None, refusal: str | None = None) -> None:
        self.value = value
        self.refusal = refusal
        self._activation: cel.Activation | None = None

    def activation(self, data: dict[str, object]) -> cel.Activation:
        """The activation of this body and ``data`` (the message's other variables, the same
        on every call for one message), made on the first call."""
        if self._activation is None:
            self._activation = _env().Activation(data={**data, "body": self.value})
        return self._activation


def parse_body(payload: bytes) -> Body:
    """The ``body`` of a filter: ``payload`` as a JSON object within the bounds of the module
    doc, or a :class:`Body` whose ``refusal`` says why not. Never raises."""
    if len(payload) > MAX_BODY_BYTES:
        return Body(None, f"body: {len(payload)} bytes, a filter parses at most {MAX_BODY_BYTES}")
    try:
        value = json.loads(payload, parse_constant=_no_constant)
    except RecursionError:
        return Body(None, f"body: nests deeper than {MAX_BODY_DEPTH} levels")
    except (ValueError, TypeError) as exc:  # UnicodeDecodeError and JSONDecodeError included
        return Body(None, f"body: not JSON ({str(exc)[:120]})")
    if not isinstance(value, dict):
        return Body(None, f"body: a JSON {type(value).__name__}, a filter needs an object")
    if not _fits(value):
        return Body(None, f"body: nests deeper than {MAX_BODY_DEPTH} levels")
    return Body(value)


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _fits(root: dict[str, object]) -> bool:
    """Within :data:`MAX_BODY_DEPTH`; integers past 64 bits made doubles (CEL refuses them)."""
    stack: list[tuple[dict[Any, object] | list[object], int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > MAX_BODY_DEPTH:
            return False
        pairs = node.items() if isinstance(node, dict) else enumerate(node)
        wide: list[tuple[Any, float]] = []
        for key, child in pairs:
            if isinstance(child, dict | list):
                stack.append((child, depth + 1))
            elif type(child) is int and not _INT64[0] <= child <= _INT64[1]:
                wide.append((key, float(child)))
        for key, value in wide:
            node[key] = value
    return True


@functools.cache
def _env() -> cel.Env:
    text = cel.Type.STRING
    types = {"headers": cel.Type.Map(text, text), "group": text, "topic": text}
    return cel.NewEnv(variables={**types, "content_type": text, "body": cel.Type.DYN})


class Filter:
    """A compiled filter; reusable, immutable, safe to share between threads.

    Example::

        f = compile_filter('headers["x-region"] == "eu"')
        f.matches([("x-region", b"eu")], group=None, topic="shop/orders", content_type=None)
    """

    __slots__ = ("_expression", "_program", "_reads_body", "_reads_headers")

    def __init__(self, expression: str, program: cel.Expression | None) -> None:
        self._expression = expression
        self._program = program
        # A variable the text never names is not read: skip converting the headers for it.
        self._reads_headers = re.search(r"\bheaders\b", expression) is not None
        # The body is parsed only for a filter that names it outside a string or comment.
        self._reads_body = bool(expression) and _NAMES_BODY.search(_masked(expression)) is not None

    @property
    def reads_body(self) -> bool:
        """Whether the filter names ``body``: pass ``body`` to :meth:`matches` then."""
        return self._reads_body

    @property
    def expression(self) -> str:
        return self._expression

    def __repr__(self) -> str:
        return f"Filter({self._expression!r})"

    def matches(
        self,
        headers: Sequence[tuple[str, bytes]],
        *,
        group: str | None,
        topic: str,
        content_type: str | None,
        body: Body | None = None,
    ) -> FilterResult:
        """Evaluate the filter on one message (stored headers, group, "project/topic"), and
        ``body`` (:func:`parse_body` of its payload) when :attr:`reads_body`.

        Never raises: a failed evaluation, or a body that is not a JSON object, is an ERROR
        result with the reason.
        """
        program = self._program
        if program is None:
            return MATCHED
        data: dict[str, object] = {
            "group": group or "",
            "topic": topic,
            "content_type": content_type or "",
        }
        if self._reads_body:
            if body is None or body.value is None:
                return FilterResult(FilterOutcome.ERROR, body.refusal if body else "body: none")
            data["headers"] = header_map(headers)  # the body's activation serves every filter
        elif self._reads_headers:
            data["headers"] = header_map(headers)
        try:
            if self._reads_body:
                assert body is not None
                value = program.eval(activation=body.activation(data))
            else:
                value = program.eval(data=data)
        except RuntimeError as exc:  # the runtime's iteration budget, spent
            return FilterResult(FilterOutcome.ERROR, str(exc))
        # Type-checked as bool, the value is a bool or an error's message, never null (whose
        # value() the binding gets wrong, see above).
        result = value.value()
        if result is True:
            return MATCHED
        if result is False:
            return NOT_MATCHED
        return FilterResult(FilterOutcome.ERROR, str(result))


MATCH_ALL = Filter("", None)


def header_map(headers: Sequence[tuple[str, bytes]]) -> dict[str, str]:
    """The ``headers`` a filter sees: repeated names joined with ", " as HTTP does."""
    found: dict[str, str] = {}
    for name, raw in headers:
        value = raw.decode("utf-8", "replace")
        found[name] = f"{found[name]}, {value}" if name in found else value
    return found


def compile_filter(expression: str | None) -> Filter:
    """Check and compile a filter once; None or blank is :data:`MATCH_ALL`.

    Raises :class:`FilterError` with the position of the first problem.
    """
    if expression is None or not expression.strip():
        return MATCH_ALL
    if len(expression) > MAX_FILTER_LENGTH:
        raise FilterError(
            f"a filter has at most {MAX_FILTER_LENGTH} characters, this one {len(expression)}",
            None,
        )
    return _compile(expression)


@functools.lru_cache(maxsize=4_096)
def _compile(expression: str) -> Filter:
    try:
        program = _env().compile(expression)
    except RuntimeError as exc:
        raise _library_error(expression, str(exc)) from None
    kind = program.return_type()
    if kind != cel.Type.BOOL:
        raise FilterError(
            f"a filter must give true or false, this one gives {kind.name().lower()}: "
            'compare it, as in headers["x-kind"] == "order"',
            FilterPosition(1, 1, 0),
        )
    _check_text(expression)
    return Filter(expression, program)


def _library_error(expression: str, text: str) -> FilterError:
    if "recursion" in text:  # the parser's and the planner's depth limits give no position
        return FilterError(
            "the expression nests too deeply: CEL takes at most 32 levels, and every pair of "
            "parentheses or link of a chain of + or - is one",
            None,
        )
    found = _DIAGNOSTIC.findall(text)
    if not found:
        return FilterError(text, None)
    line, column, problem = found[0]
    problem = problem.removesuffix(" [INVALID_ARGUMENT]").strip()
    problem = _UNDECLARED.sub(
        lambda m: f"unknown name '{m[1]}' (a filter sees {', '.join(VARIABLES)})", problem
    )
    problem = _OPERATOR.sub(lambda m: f"'{m[1] or m[2] or m[3]}'", problem)
    if len(found) > 1:
        problem += f" (and {len(found) - 1} more)"
    where = None if int(line) < 1 else FilterPosition.at(expression, int(line), int(column))
    return FilterError(problem[:1].lower() + problem[1:], where)


def _check_text(expression: str) -> None:
    """The checks CEL cannot make: header keys in upper case, nested comprehensions."""
    for token in _LITERAL.finditer(expression):
        body = token["body"]
        if body is None or token["p"] or "\\" in body or body == body.lower():
            continue
        before, after = expression[: token.start()], expression[token.end() :]
        if _HEADERS_KEY.search(before) and after.lstrip().startswith("]"):
            use = f"headers[{token[0]}] is never found"
        elif _IN_HEADERS.match(after):
            use = f"{token[0]} in headers is never true"
        else:
            continue
        raise FilterError(
            f"header names are stored in lower case, so {use}: write {token[0].lower()}",
            FilterPosition.at_offset(expression, token.start()),
        )
    nested = _nested_macro(_masked(expression))
    if nested is not None:
        raise FilterError(
            f"a comprehension ({', '.join(MACROS)}) may not run inside another: the cost "
            "would grow with the product of the two lists",
            FilterPosition.at_offset(expression, nested),
        )


def _masked(expression: str) -> str:
    """``expression`` with every comment and string literal blanked out."""
    masked = list(expression)
    for token in _LITERAL.finditer(expression):
        masked[token.start() : token.end()] = " " * (token.end() - token.start())
    return "".join(masked)


def _nested_macro(code: str) -> int | None:
    """The offset of the first comprehension called inside another's parentheses."""
    calls = {m.end() - 1: m.start("name") for m in _MACRO_CALL.finditer(code)}
    stack: list[bool] = []
    inside = 0
    for i, ch in enumerate(code):
        if ch in "([{":
            macro = i in calls
            if macro and inside:
                return calls[i]
            stack.append(macro)
            inside += macro
        elif ch in ")]}" and stack:
            inside -= stack.pop()
    return None
