"""llama.cpp's RPC backend as the cells see it (splitbench.backends.Backend)."""

from __future__ import annotations

from splitbench.backends import Backend, launches, prompts
from splitbench.backends.llamacpp import client, metrics, servers
from splitbench.backends.llamacpp import prompts as llamacpp_prompts

BACKEND = Backend(
    name="llamacpp",
    ensure=servers.ensure,
    stop=launches.stop,
    launch_errors=(servers.LaunchError,),
    healthy=launches.healthy,
    prompt_pool=llamacpp_prompts.token_pool,
    prompt=prompts.prompt,
    stream=client.run_concurrent,
    request_row=metrics.request_row,
    launch_record=servers.launch_record,
)
