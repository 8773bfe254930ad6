"""The onetrip backend (splitbench.backends.base.Backend): a worker on host B that
echoes, a front end on host A with an HTTP API of its own (server.py, api.py), over
splitbench's shared streaming client; no module of another backend."""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from splitbench.backends import lifecycle
from splitbench.backends.base import Launch, ModuleBackend
from splitbench.configuration import ConfigError
from splitbench.infra import procs
from splitbench.infra.telemetry import RpcTraffic
from splitbench.links.link import Link

from . import api

SERVER = Path(__file__).with_name("server.py")


class Servers:
    """The launch of one block: the worker on B, the front end on A."""

    @staticmethod
    def ensure(link: Link, settings: dict[str, Any], model_path: str, model_sha: str,
               toolchain: dict[str, Any], slot: str = "") -> lifecycle.Server:
        wanted = lifecycle.fingerprint(link, settings, model_sha, "onetrip")
        with procs.locked(f"server-{link.pair}"):
            server = lifecycle.current(link.pair, slot)
            if server is not None and server.fingerprint == wanted and server.alive():
                return server
            lifecycle.stop(link.pair, slot)
            return _start(link, settings, wanted, slot)

    @staticmethod
    def launch_record(link_spec: dict[str, Any], settings: dict[str, Any],
                      model: dict[str, Any], toolchain: dict[str, Any]) -> dict[str, Any]:
        return lifecycle.launch_block(
            link_spec, settings,
            lambda link: Servers.ensure(link, settings, model["path"], model["sha256"],
                                        toolchain).record)


def _start(link: Link, settings: dict[str, Any], wanted: str, slot: str
           ) -> lifecycle.Server:
    logs = procs.state_dir() / "logs"
    launch_id = uuid.uuid4().hex[:12]
    name = lifecycle.named(link.pair, slot)
    worker = [link.host_b.python, str(SERVER), "worker", link.addr_b, str(link.ports.worker(0))]
    link.host_b.spawn(worker, role="onetrip-worker", key=f"onetrip-worker-{name}",
                      extra={"pair": link.pair, "stops": "worker"},
                      log_path=logs / f"{launch_id}-worker.log")
    link.host_b.wait_listening(link.addr_b, link.ports.worker(0), timeout=30)
    port = lifecycle.http_port(link, slot)
    front = [link.host_a.python, str(SERVER), "front", str(port), link.connect_addr,
             str(link.ports.worker(0))]
    front_key = f"onetrip-front-{name}"
    link.host_a.spawn(front, role="onetrip-front", key=front_key,
                      extra={"pair": link.pair, "stops": "front"},
                      log_path=logs / f"{launch_id}-front.log")
    url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    with link.host_a.entered():
        lifecycle.wait_healthy(url, {"onetrip front": lambda: procs.find(front_key)}, 30,
                              "onetrip front")
    record = {
        "launch_id": launch_id, "fingerprint": wanted, "url": url, "pair": link.pair,
        "link": link.name, "proc_keys": [front_key, f"onetrip-worker-{name}"],
        "worker_ports": [link.ports.worker(0)], "commands": {"front": front, "worker": worker},
        "settings": settings, "started_at": time.time(),
        "load_s": round(time.monotonic() - started, 3),
    }
    return lifecycle.save(record, link.pair, slot)


class OneTrip(ModuleBackend):
    """One round trip to host B per decoded token."""

    name = "onetrip"
    servers, api = Servers, api

    def check_model(self, where: str, model: dict[str, Any], config: Any) -> None:
        if model.get("layers_on_b") is not None:
            raise ConfigError(f"{where}.layers_on_b", "backend onetrip puts nothing on B")

    def split(self, settings: dict[str, Any]) -> str:
        return "one round trip a token"

    def traffic(self, link: Link, launch: Launch) -> RpcTraffic:
        return RpcTraffic(link.connect_addr, launch.record["worker_ports"])


BACKEND = OneTrip()
