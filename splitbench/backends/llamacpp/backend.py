"""llama.cpp's RPC backend as the cells see it (splitbench.backends.Backend)."""

from __future__ import annotations

from splitbench.backends import Backend
from splitbench.backends.llamacpp import client, metrics, prompts, servers

BACKEND = Backend(
    name="llamacpp",
    ensure=servers.ensure,
    stop=servers.stop,
    launch_errors=(servers.LaunchError,),
    healthy=servers.healthy,
    prompt_pool=prompts.token_pool,
    prompt=prompts.prompt,
    stream=client.run_concurrent,
    request_row=metrics.request_row,
)
