"""What a cell sends before it measures: one release at its own shape, not recorded.

The first release of a cell ran slower than the rest in nearly every cell of the A/A
runs (the embedded default, six runs: its throughput 5-11% under the others' mean, its
prompt's server time 382 against about 300 ms at 5k x4, the first single request's 225
against 200 ms): the server meets the cell's prompt length and batch for the first time
(buffers sized, the KV cache's pages touched) and the cell's client makes its first
connections. That is a once-per-shape cost, the same in every run, so it widened each
concurrent cell's ± (six releases, one of them off) without moving between runs. A
release of the same prompt length, concurrency and output length beforehand pays it.
"""

from __future__ import annotations

import secrets
from typing import Any

from rich.console import Console

from splitbench.backends import Backend, Launch
from splitbench.contracts.slices import CellSlice

_LOG = Console(width=140, log_path=False, highlight=False)  # the job log: stdout


def release(backend: Backend, cell: CellSlice, link: Any, server: Launch) -> None:
    """One release of the cell's prompts against `server` over `link`, its replies
    dropped. A failure here is not the cell's result: the measured releases that follow
    meet the same server and record what it does."""
    with link.host_a.entered():
        try:
            pool = backend.prompt_pool(server.url)
            prompts = [backend.prompt(pool, cell["prompt_tokens"], secrets.randbits(63))
                       for _ in range(cell["concurrency"])]
            replies = backend.stream(server.url, prompts, cell["n_predict"],
                                     cell["request_timeout_s"])
            failed = [r for r in replies if r.error_type or r.http_status != 200]
            said = f"{len(failed)} of {len(replies)} failed" if failed else "done"
        except Exception as exc:  # noqa: BLE001 - the measured releases will say
            said = f"failed: {type(exc).__name__}: {exc}"
    _LOG.log(f"{link.pair}/{link.name} {cell['prompt_tokens']} tokens "
             f"x{cell['concurrency']}: warm-up release {said}")
