"""The one poll loop: what it returns, when it gives up, and that an error ends it."""

from __future__ import annotations

import itertools
import time

import pytest

from splitbench.infra.polling import poll_until


def test_returns_the_first_true_answer():
    answers = iter([None, 0, "", "ready", "later"])
    assert poll_until(lambda: next(answers), timeout=5, interval=0) == "ready"


def test_gives_none_at_the_deadline_having_asked_at_least_twice():
    asked = itertools.count()
    started = time.monotonic()
    assert poll_until(lambda: next(asked) < 0, timeout=0.2, interval=0.05) is None
    assert time.monotonic() - started >= 0.2
    assert next(asked) >= 2


def test_an_error_from_the_condition_ends_the_wait():
    def broken() -> bool:
        raise RuntimeError("the server died")

    with pytest.raises(RuntimeError, match="died"):
        poll_until(broken, timeout=60, interval=1)
