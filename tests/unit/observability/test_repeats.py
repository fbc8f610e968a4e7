"""The repeat limit on error lines (`observability.repeats`), with a clock the test turns: at most `burst` lines of
one kind per interval, the rest counted and said in one line once the interval is over; other lines untouched."""

from __future__ import annotations

import logging

import pytest

from observability.repeats import RepeatLimit, limit_repeats


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)

    def messages(self) -> list[str]:
        return [record.getMessage() for record in self.records]


@pytest.fixture
def logged():
    """A logger with a limit of 3 lines a kind per 60 s on a turnable clock, and what reached its handler."""
    clock, lines = Clock(), Lines()
    logger = logging.getLogger("test.repeats")
    logger.handlers[:], logger.propagate = [lines], False
    logger.setLevel(logging.INFO)
    limit_repeats(RepeatLimit(3, 60.0, clock), logger)
    yield logger, clock, lines
    logger.handlers[:], logger.filters[:] = [], []


def completion(logger: logging.Logger, path: str, status: int, route: str = "/serve") -> None:
    logger.info("POST %s -> %d", path, status, extra={"route": route, "status": status})


def test_a_repeated_error_writes_its_burst_then_one_summary_once_the_interval_is_over(logged):
    logger, clock, lines = logged
    for n in range(1000):
        completion(logger, f"/serve/name-{n}", 404)  # each path different: still one kind
    assert lines.messages() == ["POST /serve/name-0 -> 404", "POST /serve/name-1 -> 404", "POST /serve/name-2 -> 404"]
    clock.now += 60
    completion(logger, "/serve/again", 404)
    summary, again = lines.records[3:]
    assert summary.getMessage().startswith("suppressed 997 similar lines (route /serve, status 404) in 60 s")
    assert (summary.suppressed, summary.status, summary.request_id, summary.levelname) == (997, 404, "-", "WARNING")
    assert again.getMessage() == "POST /serve/again -> 404", "a new interval starts with a new burst"


def test_each_route_and_status_has_its_own_burst_and_successes_and_plain_lines_are_never_limited(logged):
    logger, clock, lines = logged
    for _ in range(10):
        completion(logger, "/serve/x", 404)
        completion(logger, "/serve/x", 422)
        completion(logger, "/v2/models/x/infer", 404, route="/v2")
        completion(logger, "/serve/x", 200)
        logger.info("a line without a status")
        logger.warning("a 431 from the protocol", extra={"status": 431})
    statuses = [(getattr(r, "route", "-"), getattr(r, "status", None)) for r in lines.records]
    assert statuses.count(("/serve", 404)) == statuses.count(("/serve", 422)) == statuses.count(("/v2", 404)) == 3
    assert statuses.count(("/serve", 200)) == 10 and statuses.count(("-", None)) == 10
    assert statuses.count(("-", 431)) == 3


def test_the_summary_comes_with_the_next_line_of_any_kind_and_kinds_without_excess_say_nothing(logged):
    logger, clock, lines = logged
    for _ in range(5):
        completion(logger, "/serve/x", 404)
    completion(logger, "/serve/x", 422)  # one line: nothing left out
    clock.now += 61
    logger.info("an ordinary line, later")
    messages = lines.messages()
    assert [m for m in messages if m.startswith("suppressed")] == [
        "suppressed 2 similar lines (route /serve, status 404) in 61 s after the first 3: POST %s -> %d"
    ]
    assert messages[-1] == "an ordinary line, later"


def test_a_limit_put_again_replaces_the_earlier_one():
    logger = logging.getLogger("test.repeats.again")
    first, second = RepeatLimit(1, 1.0), RepeatLimit(2, 1.0)
    limit_repeats(first, logger)
    limit_repeats(second, logger)
    assert logger.filters == [second]
    logger.filters[:] = []


def test_a_limit_refuses_a_burst_or_interval_that_would_drop_everything():
    with pytest.raises(ValueError, match="burst >= 1 and interval > 0"):
        RepeatLimit(0, 60.0)
