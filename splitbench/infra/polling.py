"""Waiting for something to become true, with a deadline: the one poll loop."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def poll_until(ready: Callable[[], T], timeout: float, interval: float) -> T | None:
    """Call `ready` every `interval` seconds until it returns something true, and return
    that; None once `timeout` seconds have passed (it is asked at least once, and once
    more at the deadline). An exception from `ready` ends the wait with it."""
    deadline = time.monotonic() + timeout
    while True:
        found = ready()
        if found:
            return found
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        time.sleep(min(interval, left))
