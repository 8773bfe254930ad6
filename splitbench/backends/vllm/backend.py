"""vLLM's tensor or pipeline parallel across the pair, as the cells see it
(splitbench.backends.Backend)."""

from __future__ import annotations

from splitbench.backends import Backend, launches, prompts
from splitbench.backends.vllm import client, metrics, servers
from splitbench.backends.vllm import prompts as vllm_prompts

BACKEND = Backend(
    name="vllm",
    ensure=servers.ensure,
    stop=launches.stop,
    launch_errors=(servers.LaunchError,),
    healthy=launches.healthy,
    prompt_pool=vllm_prompts.token_pool,
    prompt=prompts.prompt,
    stream=client.run_concurrent,
    request_row=metrics.request_row,
    launch_record=servers.launch_record,
)
