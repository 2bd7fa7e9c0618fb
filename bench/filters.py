"""The filter benchmark: what a subscription filter costs per message, beside hand-written Python.

For a few typical expressions, each on a message it matches and on one it does not, it prints
the nanoseconds per ``Filter.matches()`` call and per call of a Python function written by hand
to answer the same question from the same input (stored headers as (name, bytes) pairs), and
the ratio of the two. Then the cost of building the ``headers`` map alone, how the cost grows
with the number of headers, what compiling costs, and what a filter over the JSON body costs
beside a header filter (1 KiB and 64 KiB bodies; the first subscription to read a message
parses and converts it, the others reuse its Body). With ``--compare`` it also times the CEL
libraries we did not pick, when they are installed (``pip install cel-python
common-expression-language``), on the same activation. It prints figures, never asserts.
Usage::

    .venv/bin/python bench/filters.py [--repeat 7] [--number 20000] [--compare]
"""

from __future__ import annotations

import argparse
import importlib
import json
import platform
import timeit
from collections.abc import Callable, Sequence
from typing import Any

from core.filters import Body, Filter, compile_filter, header_map, parse_body

Headers = Sequence[tuple[str, bytes]]
Check = Callable[[Headers, str | None, str, str | None], bool]

BASE: list[tuple[str, bytes]] = [
    ("x-message-id", b"01HZX5V0000000000000000000"),
    ("x-produced-at", b"1700000000000"),
    ("x-group-id", b"g2"),
    ("content-type", b"application/json"),
    ("x-kind", b"order"),
]
HIT = [*BASE, ("x-region", b"eu-west"), ("x-priority", b"high")]
MISS = [*BASE, ("x-region", b"us-east")]
TOPIC = "shop/orders"


def _get(headers: Headers, name: str) -> str | None:
    for key, value in headers:
        if key == name:
            return value.decode("utf-8", "replace")
    return None


def _has(headers: Headers, name: str) -> bool:
    return any(key == name for key, _ in headers)


# (expression, the same question by hand, group on the matching message, on the other one)
CASES: list[tuple[str, Check, str, str]] = [
    (
        'headers["x-region"] == "eu-west"',
        lambda h, g, t, c: _get(h, "x-region") == "eu-west",
        "g2",
        "g2",
    ),
    (
        'headers["x-region"] in ["eu-west", "us-west"]',
        lambda h, g, t, c: _get(h, "x-region") in ("eu-west", "us-west"),
        "g2",
        "g2",
    ),
    ('"x-priority" in headers', lambda h, g, t, c: _has(h, "x-priority"), "g2", "g2"),
    (
        'headers["x-region"].startsWith("eu-")',
        lambda h, g, t, c: (_get(h, "x-region") or "").startswith("eu-"),
        "g2",
        "g2",
    ),
    (
        '!(group == "g1") && content_type == "application/json"',
        lambda h, g, t, c: g != "g1" and c == "application/json",
        "g2",
        "g1",
    ),
    (
        'topic == "shop/refunds" || headers["x-region"] != "us-east"',
        lambda h, g, t, c: t == "shop/refunds" or _get(h, "x-region") != "us-east",
        "g2",
        "g2",
    ),
]


def per_call_ns(call: Callable[[], object], number: int, repeat: int) -> float:
    """The best of ``repeat`` runs: on a busy machine the minimum is the least noisy."""
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e9


def _filter_call(f: Filter, headers: Headers, group: str) -> Callable[[], object]:
    return lambda: f.matches(headers, group=group, topic=TOPIC, content_type="application/json")


def bench_cases(number: int, repeat: int) -> None:
    print(f"{'expression':60} {'message':8} {'filter ns':>10} {'python ns':>10} {'ratio':>6}")
    for expression, check, hit_group, miss_group in CASES:
        f = compile_filter(expression)
        for label, headers, group in (("match", HIT, hit_group), ("no match", MISS, miss_group)):
            expected = label == "match"
            got = f.matches(headers, group=group, topic=TOPIC, content_type="application/json")
            answer = check(headers, group, TOPIC, "application/json")
            if got.matched is not expected or answer is not expected:
                raise SystemExit(f"{expression!r} on {label}: filter {got}, python {answer}")
            ours = per_call_ns(_filter_call(f, headers, group), number, repeat)
            theirs = per_call_ns(
                lambda h=headers, g=group, by_hand=check: by_hand(h, g, TOPIC, "application/json"),
                number,
                repeat,
            )
            print(f"{expression:60} {label:8} {ours:10.0f} {theirs:10.0f} {ours / theirs:6.1f}")


def bench_scaling(number: int, repeat: int) -> None:
    f = compile_filter('headers["x-region"] == "eu-west"')
    g = compile_filter('group == "g2"')
    print(f"\n{'headers':>8} {'header_map ns':>14} {'reads headers ns':>17} {'reads group ns':>15}")
    for count in (7, 20, 64):
        headers = HIT + [(f"x-extra-{i}", b"some value") for i in range(count - len(HIT))]
        build = per_call_ns(lambda h=headers: header_map(h), number, repeat)
        reads = per_call_ns(_filter_call(f, headers, "g2"), number, repeat)
        skips = per_call_ns(_filter_call(g, headers, "g2"), number, repeat)
        print(f"{count:8} {build:14.0f} {reads:17.0f} {skips:15.0f}")


def bench_compile(repeat: int) -> None:
    from core import filters

    print(f"\n{'expression':60} {'compile us':>10}")
    for expression, *_ in CASES:

        def fresh(e: str = expression) -> object:
            filters._compile.cache_clear()
            return compile_filter(e)

        print(f"{expression:60} {per_call_ns(fresh, 200, repeat) / 1000:10.1f}")
    filters._compile.cache_clear()


def _alternatives() -> dict[str, Callable[[str], Callable[[dict[str, Any]], object]]]:
    found: dict[str, Callable[[str], Callable[[dict[str, Any]], object]]] = {}
    try:
        rust: Any = importlib.import_module("cel")
        found["common-expression-language"] = lambda e: rust.compile(e).execute
    except ImportError:
        pass
    try:
        celpy: Any = importlib.import_module("celpy")
        adapt = celpy.json_to_cel

        def celpy_compile(e: str) -> Callable[[dict[str, Any]], object]:
            env = celpy.Environment()
            program = env.program(env.compile(e))
            return lambda data: program.evaluate({k: adapt(v) for k, v in data.items()})

        found["cel-python"] = celpy_compile
    except ImportError:
        pass
    return found


def bench_compare(number: int, repeat: int) -> None:
    found = _alternatives()
    if not found:
        print("\n--compare: neither cel-python nor common-expression-language is installed")
        return
    print(f"\n{'expression (on the matching message)':60} {'library':28} {'ns':>8}")
    for expression, _, group, _ in CASES:
        f = compile_filter(expression)
        ours = per_call_ns(_filter_call(f, HIT, group), number, repeat)
        print(f"{expression:60} {'cel-expr-python (ours)':28} {ours:8.0f}")
        for name, make in found.items():
            run = make(expression)

            def call(run: Callable[[dict[str, Any]], object] = run, g: str = group) -> object:
                data = {"headers": header_map(HIT), "group": g, "topic": TOPIC}
                return run({**data, "content_type": "application/json"})

            print(f"{'':60} {name:28} {per_call_ns(call, max(number // 20, 50), repeat):8.0f}")


# The largest header set one message can carry (the producer's default limits): 64 carried
# X- headers, 32 KiB of header bytes in all; and filters written to be slow on it.
HOSTILE_HEADERS = [(f"x-h{i}", b"a" * 500) for i in range(64)]
HOSTILE = [
    'headers.exists(k, headers[k].matches("(a+)+b"))',
    'headers.all(k, headers[k].contains("b") || size(headers[k]) > 0)',
    'headers.exists(k, headers[k] + headers[k] + headers[k] == "x")',
]


def bench_hostile(seconds: float = 2.0) -> None:
    """The worst single evaluation of hostile filters on the largest headers the producer
    accepts: what one message can cost the worker's event loop, beside a one-header lookup."""
    print("hostile filters on 64 headers x 500 B (the produce limit), worst call of each:")
    for expression in ['headers["x-h0"] == "a"', *HOSTILE]:
        f = compile_filter(expression)
        worst, calls, start = 0.0, 0, timeit.default_timer()
        while timeit.default_timer() - start < seconds:
            t0 = timeit.default_timer()
            f.matches(HOSTILE_HEADERS, group=None, topic=TOPIC, content_type=None)
            worst, calls = max(worst, timeit.default_timer() - t0), calls + 1
        rate = calls / (timeit.default_timer() - start)
        print(f"  {expression[:62]:62s} {rate:9.0f}/s  worst {worst * 1000:6.2f} ms")


def json_body(size: int) -> bytes:
    """An order of about ``size`` bytes of JSON: a few fields and many line items."""
    items: list[object] = []
    order = {"region": "eu", "amount": 150, "customer": {"vip": True}, "items": items}
    while len(json.dumps(order)) < size - 60:
        items.append({"sku": f"abc-{len(items):05}", "qty": 3, "price": 12.5, "tags": ["x"]})
    return json.dumps(order).encode()


def bench_body(number: int, repeat: int) -> None:
    """Per message: a header filter; a body filter on a fresh message (parse + conversion, what
    the first subscription pays), and on a Body already read (what every other one pays)."""
    header = compile_filter('headers["x-region"] == "eu-west"')
    body = compile_filter('body.region == "eu" && body.amount > 100')
    print(f"\n{'filter':44} {'body':>7} {'first us':>9} {'others us':>10}")
    plain = per_call_ns(_filter_call(header, HIT, "g2"), number, repeat) / 1000
    print(f"{header.expression:44} {'-':>7} {plain:9.1f}")
    for size in (1024, 64 * 1024):
        payload = json_body(size)

        def first(p: bytes = payload) -> object:
            return body.matches(HIT, group="g2", topic=TOPIC, content_type=None, body=parse_body(p))

        shared = parse_body(payload)

        def others(b: Body = shared) -> object:
            return body.matches(HIT, group="g2", topic=TOPIC, content_type=None, body=b)

        assert body.matches(HIT, group="g2", topic=TOPIC, content_type=None, body=shared).matched
        calls = max(number // (size // 512), 20)
        once = per_call_ns(first, calls, repeat) / 1000
        again = per_call_ns(others, number, repeat) / 1000
        print(f"{body.expression:44} {len(payload) / 1024:5.0f}Ki {once:9.1f} {again:10.1f}")
        parse = per_call_ns(lambda p=payload: parse_body(p), calls, repeat) / 1000
        print(f"{'  of which parse_body':44} {'':7} {parse:9.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--number", type=int, default=20_000, help="calls per timing run")
    parser.add_argument("--repeat", type=int, default=7, help="timing runs; the best is kept")
    parser.add_argument("--compare", action="store_true", help="also time the other libraries")
    args = parser.parse_args()
    print(f"python {platform.python_version()} on {platform.machine()}; best of {args.repeat}")
    bench_cases(args.number, args.repeat)
    bench_scaling(args.number, args.repeat)
    bench_compile(args.repeat)
    bench_body(args.number, args.repeat)
    bench_hostile()
    if args.compare:
        bench_compare(args.number, args.repeat)


if __name__ == "__main__":
    main()
