"""The onetrip backend (splitbench.backends.base.Backend): a worker on host B that
echoes, a front end on host A with an HTTP API of its own (server.py, api.py), over
splitbench's shared streaming client; its own keys (section.py), toolchain record
(toolchain.py, run on each host) and model format (model.py); no module of another
backend."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

from splitbench.backends import lifecycle
from splitbench.backends.base import Launch, ModuleBackend, toolchain_failure
from splitbench.infra import files, procs
from splitbench.infra.hosts import HostError, host_from_spec
from splitbench.infra.telemetry import RpcTraffic
from splitbench.links.link import Link

from . import api, vocabulary

SERVER = Path(__file__).with_name("server.py")
TOOLCHAIN = Path(__file__).with_name("toolchain.py")


class Servers:
    """The launch of one block: the worker on B, the front end on A."""

    @staticmethod
    def ensure(link: Link, settings: dict[str, Any], model_path: str, model_sha: str,
               toolchain: dict[str, Any], slot: str = "") -> lifecycle.Server:
        wanted = lifecycle.fingerprint(link, settings, model_sha,
                                       toolchain["a"]["server_sha256"])
        with procs.locked(f"server-{link.pair}"):
            server = lifecycle.current(link.pair, slot)
            if server is not None and server.fingerprint == wanted and server.alive():
                return server
            lifecycle.stop(link.pair, slot)
            return _start(link, settings, model_path, wanted, slot)

    @staticmethod
    def launch_record(link_spec: dict[str, Any], settings: dict[str, Any],
                      model: dict[str, Any], toolchain: dict[str, Any]) -> dict[str, Any]:
        def start(link: Link) -> dict[str, Any]:
            record = Servers.ensure(link, settings, model["path"], model["sha256"],
                                    toolchain).record
            return {**record, "toolchain": toolchain}

        return lifecycle.launch_block(link_spec, settings, start, backend="onetrip",
                                      reasons=[toolchain_failure(toolchain)])


def _start(link: Link, settings: dict[str, Any], model_path: str, wanted: str, slot: str
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
             str(link.ports.worker(0)), model_path,
             str(settings["onetrip"]["token_bytes"])]
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
    model_format = vocabulary.FORMAT
    own_toolchain = True
    servers, api = Servers, api

    def server_settings(self, model: dict[str, Any], slots: int, tokens: int
                        ) -> dict[str, Any]:
        """The base's, and its own section with its defaults (what crosses per token)."""
        from .section import OneTripModel  # the typed config: planning's, not a cell's

        own = OneTripModel.model_validate(model.get("onetrip") or {})
        return {**super().server_settings(model, slots, tokens), "onetrip": own.model_dump()}

    def write_synthetic(self, synthetic: dict[str, int], path: str) -> None:
        vocabulary.write(synthetic, path)

    def describe_model(self, model: dict[str, Any], path: Any) -> dict[str, Any]:
        return vocabulary.describe(path, bool(model.get("synthetic")))

    def record_toolchain(self, pair: str, hosts: dict[str, Any], out: str,
                         source: str | None = None) -> dict[str, Any]:
        """Each host runs toolchain.py with its own Python: the same server on both."""
        try:
            ends = {side: json.loads(host_from_spec(side, hosts[side]).run(
                [hosts[side].get("python", "python3"), str(TOOLCHAIN)]).stdout)
                for side in ("a", "b")}
            if ends["a"]["server_sha256"] != ends["b"]["server_sha256"]:
                raise HostError(f"pair '{pair}': the hosts' onetrip servers differ")
            data = {"pair": pair, "backend": self.name, "status": "ok", **ends}
        except (HostError, ValueError) as exc:
            data = {"pair": pair, "backend": self.name, "status": "failed",
                    "error": f"{type(exc).__name__}: {exc}", "a": {}, "b": {}}
        files.write_json(Path(out), data)
        return data

    def split(self, settings: dict[str, Any]) -> str:
        return "one round trip a token"

    def traffic(self, link: Link, launch: Launch) -> RpcTraffic:
        return RpcTraffic(link.connect_addr, launch.record["worker_ports"])


BACKEND = OneTrip()
