""":class:`HeadGuard` counts an answer's heads the same however the bytes are cut into
chunks, refuses at one byte over each limit and not before; :class:`QuietLog` logs once per
key per interval. The sender against hostile endpoints is test_hostile_answers.py."""

from __future__ import annotations

import logging

import pytest

from delivery_workers.answer_limits import AnswerLimits, HeadGuard, QuietLog

SMALL = AnswerLimits(
    max_status_line_bytes=64,
    max_header_line_bytes=64,
    max_headers=3,
    max_head_bytes=1024,
    max_interim_answers=2,
)


def _verdict(answer: bytes, chunk: int) -> tuple[str | None, bool, int]:
    guard = HeadGuard(SMALL)
    for start in range(0, len(answer), chunk):
        problem = guard.feed(answer[start : start + chunk])
        if problem is not None:
            return problem, guard.done, guard.body_bytes
    return None, guard.done, guard.body_bytes


def _header(size: int) -> bytes:
    """A header line of ``size`` bytes, CRLF included."""
    return b"X-A: " + b"v" * (size - 7) + b"\r\n"


# name -> (the answer, a fragment of the refusal or None when it passes)
ANSWERS: dict[str, tuple[bytes, str | None]] = {
    "fits": (b"HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\nbody", None),
    "status line at its limit": (b"HTTP/1.1 200 " + b"O" * 49 + b"\r\n\r\n", None),
    "status line over": (b"HTTP/1.1 200 " + b"O" * 50 + b"\r\n\r\n", "a status line over 64"),
    "header at its limit": (b"HTTP/1.1 200 OK\r\n" + _header(64) + b"\r\nbody", None),
    "header over": (b"HTTP/1.1 200 OK\r\n" + _header(65) + b"\r\n", "a header line over 64"),
    "four headers": (b"HTTP/1.1 200 OK\r\nA: 1\r\nB: 2\r\nC: 3\r\nD: 4\r\n\r\n", "more than 3"),
    "two interim": (b"HTTP/1.1 100 Continue\r\n\r\n" * 2 + b"HTTP/1.1 204 No\r\n\r\n", None),
    "three interim": (b"HTTP/1.1 103 Early\r\n\r\n" * 3, "more than 2 interim"),
    "an upgrade": (b"HTTP/1.1 101 Switching\r\nUpgrade: x\r\n\r\n", "101 Switching Protocols"),
    "bare LF": (b"HTTP/1.1 200 OK\nA: 1\n\nbody", None),
    "a few empty lines first": (b"\r\n\r\nHTTP/1.1 101 S\r\n\r\n", "101 Switching Protocols"),
    "many empty lines first": (b"\r\n" * 100, "empty lines before the status line"),
}


@pytest.mark.parametrize("chunk", [1, 3, 7, 4096])
@pytest.mark.parametrize("name", ANSWERS)
def test_the_verdict_does_not_depend_on_the_chunks(name: str, chunk: int) -> None:
    answer, expected = ANSWERS[name]
    problem, done, body = _verdict(answer, chunk)
    if expected is None:
        assert problem is None and done
        assert body == (4 if answer.endswith(b"body") else 0)  # the rest is the body's
    else:
        assert problem is not None and expected in problem, problem


def test_the_whole_head_is_bounded_across_interim_answers() -> None:
    limits = AnswerLimits(max_head_bytes=1024, max_interim_answers=1000)
    guard = HeadGuard(limits)
    interim = b"HTTP/1.1 102 Processing\r\n\r\n"
    fed = 0
    problem = None
    while problem is None:
        problem = guard.feed(interim)
        fed += len(interim)
    assert problem == "a head over 1024 bytes" and fed <= 1024 + len(interim)


def test_a_quiet_log_says_it_once_per_key_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    quiet = QuietLog(logging.getLogger("test.quiet"), 60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, "test.quiet"):
        said = [quiet.warning("a", "a %d", n) for n in range(5)]
        said.append(quiet.warning("b", "b"))
        now[0] = 60.0
        said.append(quiet.warning("a", "a again"))
    assert said == [True, False, False, False, False, True, True]
    assert [r.getMessage() for r in caplog.records] == ["a 0", "b", "a again"]
