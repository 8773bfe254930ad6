"""A page opened in headless Chromium, driven over its DevTools protocol: what it
rendered (each chart's box and ink in a screenshot, the console's errors, any request
beyond the page), and what a laptop-width window shows of it."""

from __future__ import annotations

import base64
import fcntl
import io
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from splitbench.report.html_parts import LONG_CELL

CHROMIUM = next(filter(None, map(shutil.which, ("chromium", "chromium-browser",
                                                "google-chrome"))), None)
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium not installed (./bootstrap.sh test installs "
                             "Debian's chromium when run as root)")


class DevTools:
    """Headless Chromium over the DevTools protocol on a pipe (--remote-debugging-pipe:
    commands on fd 3, replies on fd 4, NUL-separated JSON); needs no WebSocket library."""

    def __init__(self, binary: str) -> None:
        to_child, self._to_browser = os.pipe()
        self._from_browser, from_child = os.pipe()
        # Above fd 4, so that placing them on 3 and 4 in the child cannot clobber one.
        child_in = fcntl.fcntl(to_child, fcntl.F_DUPFD_CLOEXEC, 10)
        child_out = fcntl.fcntl(from_child, fcntl.F_DUPFD_CLOEXEC, 10)
        os.close(to_child)
        os.close(from_child)
        self._profile = tempfile.TemporaryDirectory()

        def on_fds_3_and_4() -> None:
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        self.proc = subprocess.Popen(
            [binary, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
             "--hide-scrollbars", "--remote-debugging-pipe",
             f"--user-data-dir={self._profile.name}", "about:blank"],
            preexec_fn=on_fds_3_and_4, close_fds=False,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(child_in)
        os.close(child_out)
        self._inbox: queue.Queue = queue.Queue()
        self.events: list[dict] = []
        self._id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        buf = b""
        with os.fdopen(self._from_browser, "rb", buffering=0) as pipe:
            while chunk := pipe.read(1 << 16):
                *messages, buf = (buf + chunk).split(b"\0")
                for message in messages:
                    self._inbox.put(json.loads(message))
        self._inbox.put(None)

    def _next(self, deadline: float) -> dict:
        message = self._inbox.get(timeout=max(0.01, deadline - time.monotonic()))
        if message is None:
            raise RuntimeError("chromium closed the DevTools pipe")
        return message

    def send(self, method: str, params: dict | None = None, session: str | None = None,
             timeout: float = 60) -> dict:
        self._id += 1
        message = {"id": self._id, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while (reply := self._next(deadline)).get("id") != self._id:
            self.events.append(reply)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while not any(e.get("method") == method for e in self.events):
            self.events.append(self._next(deadline))
        return next(e for e in self.events if e.get("method") == method)

    def close(self) -> None:
        try:
            self.send("Browser.close", timeout=10)
            self.proc.wait(timeout=10)
        except (RuntimeError, queue.Empty, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        os.close(self._to_browser)
        self._profile.cleanup()


CHART_BOXES = """JSON.stringify(Array.from(document.querySelectorAll('.chart')).map(el => {
  const r = el.getBoundingClientRect(), svg = el.querySelector('svg');
  return {id: el.id, marks: svg ? svg.querySelectorAll('path, rect, line, text').length : 0,
          x: r.left + scrollX, y: r.top + scrollY, width: r.width, height: r.height};
}))"""


# How the page lies in the window: its width against the window's, its first section,
# and each table's box (wider content scrolls inside it) with its widest long cell.
LAYOUT = """JSON.stringify({
  scrollWidth: document.documentElement.scrollWidth, innerWidth: window.innerWidth,
  firstSection: (document.querySelector('body section') || {id: null}).id,
  unboxed: Array.from(document.querySelectorAll('table'))
    .filter(t => !t.closest('.table-wrap')).length,
  boxes: Array.from(document.querySelectorAll('.table-wrap')).map(el => ({
    section: (el.closest('section[id]') || {id: null}).id,
    content: el.scrollWidth, width: el.clientWidth,
    widestLong: Math.max(0, ...Array.from(el.querySelectorAll('td'))
      .filter(td => td.textContent.length > %d)
      .map(td => Math.round(td.getBoundingClientRect().width)))}))
})"""
# A long cell this wide (px) in a table wider than its box is one that does not wrap.
ONE_LINE_PX = 400


def _evaluate(browser: DevTools, session: str, expression: str) -> Any:
    result = browser.send("Runtime.evaluate", {"expression": expression,
                                               "returnByValue": True}, session)
    return result["result"].get("value")


def open_page(page: Path, width: int = 1280, wait_s: float = 30) -> dict[str, Any]:
    """Load page in headless Chromium; return what a reader would have seen: the charts'
    status, each chart's box and marks, console errors, requests and a full screenshot."""
    browser = DevTools(CHROMIUM)
    try:
        target = browser.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = browser.send("Target.attachToTarget",
                               {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Runtime", "Log", "Network", "Page"):
            browser.send(f"{domain}.enable", session=session)
        browser.send("Emulation.setDeviceMetricsOverride", {
            "width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False}, session)
        browser.send("Page.navigate", {"url": page.resolve().as_uri()}, session)
        browser.wait_for("Page.loadEventFired")
        deadline = time.monotonic() + wait_s
        while not (status := _evaluate(browser, session, "document.body.dataset.charts")):
            if time.monotonic() > deadline:
                break
            time.sleep(0.1)
        boxes = json.loads(_evaluate(browser, session, CHART_BOXES))
        layout = json.loads(_evaluate(browser, session, LAYOUT % LONG_CELL))
        size = browser.send("Page.getLayoutMetrics", session=session)["cssContentSize"]
        shot = browser.send("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size["width"], "height": size["height"],
                     "scale": 1}}, session)
        return {"status": status, "boxes": boxes, "events": list(browser.events),
                "layout": layout, "screenshot": base64.b64decode(shot["data"])}
    finally:
        browser.close()


def _errors(events: list[dict]) -> list[str]:
    found = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.consoleAPICalled" and params["type"] in ("error", "assert"):
            found.append("console: " + " ".join(str(a.get("value", a.get("description")))
                                                for a in params["args"]))
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            found.append("exception: " + details.get("exception", {}).get(
                "description", details.get("text", "")))
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            found.append("log: " + params["entry"]["text"])
        elif method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            if not url.startswith(("file:", "data:")):
                found.append(f"network request: {url}")
    return found


def _ink(screenshot: bytes, box: dict) -> float:
    """Share of the box's pixels that are not (near) white in the screenshot."""
    from PIL import Image

    image = Image.open(io.BytesIO(screenshot)).convert("L")
    crop = image.crop((int(box["x"]), int(box["y"]), int(box["x"] + box["width"]),
                       int(box["y"] + box["height"])))
    histogram = crop.histogram()
    return 1 - sum(histogram[240:]) / max(1, sum(histogram))


def problems(seen: dict[str, Any], expected_charts: int) -> list[str]:
    """Everything that tells a broken page from a good one; empty when the page is good."""
    found = _errors(seen["events"])
    if seen["status"] != f"{expected_charts}/{expected_charts}":
        found.append(f"charts rendered: {seen['status'] or 'never finished'}")
    if len(seen["boxes"]) != expected_charts:
        found.append(f"{len(seen['boxes'])} chart containers, expected {expected_charts}")
    for box in seen["boxes"]:
        if box["marks"] < 10:
            found.append(f"{box['id']}: {box['marks']} SVG marks")
        if (ink := _ink(seen["screenshot"], box)) < 0.02:
            found.append(f"{box['id']}: blank in the screenshot ({ink:.1%} ink)")
    return found


def laptop_problems(seen: dict[str, Any]) -> list[str]:
    """What keeps the page from reading on a laptop; empty when it does."""
    layout = seen["layout"]
    found = []
    if layout["firstSection"] != "findings":
        found.append(f"first section: {layout['firstSection']}, not the findings")
    if layout["scrollWidth"] > layout["innerWidth"]:
        found.append(f"the page scrolls sideways: {layout['scrollWidth']} px wide in a "
                     f"{layout['innerWidth']} px window")
    if layout["unboxed"]:
        found.append(f"{layout['unboxed']} tables outside a scrolling box")
    for box in layout["boxes"]:
        if box["content"] > box["width"] + 1 and box["widestLong"] > ONE_LINE_PX:
            found.append(f"{box['section']}: long cells do not wrap (one {box['widestLong']} "
                         f"px wide, its table {box['content']} px in a {box['width']} px box)")
    return found
