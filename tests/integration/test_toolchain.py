import hashlib
import json
import os
import stat

import pytest

from splitbench.backends import base
from splitbench.backends.llamacpp import toolchain
from splitbench.infra.hosts import Host
from splitbench.links import readiness
from tests.support import free_port


def fake_build(folder, version: str):
    """Two executables that print a version, like a llama.cpp build's."""
    folder.mkdir()
    for name in toolchain.BINARIES:
        path = folder / name
        path.write_text(f"#!/bin/sh\necho 'version: {version}' >&2\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return folder


def test_same_build_on_both_hosts_passes(tmp_path):
    a = toolchain.describe(Host("a"), fake_build(tmp_path / "a", "7 (abc)"), "pair p")
    b = toolchain.describe(Host("b"), fake_build(tmp_path / "b", "7 (abc)"), "pair p")
    assert a["llama_server_version"] == "version: 7 (abc)"
    toolchain.check_same_build(a, b, "pair p")


def test_different_builds_are_refused_with_both_named(tmp_path):
    a = toolchain.describe(Host("a"), fake_build(tmp_path / "a", "7 (abc)"), "pair p")
    b = toolchain.describe(Host("b"), fake_build(tmp_path / "b", "8 (def)"), "pair p")
    with pytest.raises(toolchain.ToolchainError) as error:
        toolchain.check_same_build(a, b, "pair p")
    assert "pair p" in str(error.value)
    assert "7 (abc)" in str(error.value) and "8 (def)" in str(error.value)


def test_missing_binary_names_host_and_path(tmp_path):
    folder = fake_build(tmp_path / "a", "7")
    os.remove(folder / "ggml-rpc-server")
    with pytest.raises(toolchain.ToolchainError, match="host a has no executable .*rpc-server"):
        toolchain.describe(Host("a"), folder, "pair p")


def test_the_pip_build_holds_the_two_programs_only_and_the_record_hashes_them(tmp_path):
    """The installed llama.cpp build (bootstrap.sh's lean build,
    envs/llama-cpp-lean.cmake): its bin/ holds exactly the two programs splitbench
    runs, each an executable file, and the toolchain record's hashes are theirs.
    Beside them only the package's own empty placeholder (it ships bin/.gitkeep)."""
    bin_dir = toolchain.pip_bin_dir()
    held = sorted(path.name for path in bin_dir.iterdir())
    assert held == sorted([*toolchain.BINARIES, ".gitkeep"]), held
    assert (bin_dir / ".gitkeep").stat().st_size == 0
    for name in toolchain.BINARIES:
        path = bin_dir / name
        assert path.is_file() and not path.is_symlink(), path
        assert os.access(path, os.X_OK), path
    recorded = toolchain.record("p", "pip", {"a": {}, "b": {}}, tmp_path / "toolchain.json")
    assert recorded["status"] == "ok", recorded.get("error")
    for host in ("a", "b"):
        assert recorded[host]["bin_dir"] == str(bin_dir)
        for name in toolchain.BINARIES:
            digest = hashlib.sha256((bin_dir / name).read_bytes()).hexdigest()
            assert recorded[host][f"{name}_sha256"] == digest, (host, name)


def test_the_toolchain_stage_checks_both_hosts_first_and_a_failure_is_the_pairs_result(
        tmp_path, monkeypatch):
    """The pair's first job makes the doctor's host checks: a tool missing on A, or a
    host B that cannot be reached, is the pair's recorded result, named, with its fix."""
    out = tmp_path / "toolchain.json"
    ready = toolchain.record("p", "pip", {"a": {}, "b": {}}, out)
    assert ready["status"] == "ok"
    assert ready["readiness"] == [f"✓ p: host A has {', '.join(readiness.TOOLS_EMBEDDED)}"]

    monkeypatch.setattr(readiness, "TOOLS_EMBEDDED", (*readiness.TOOLS_EMBEDDED, "sb-none"))
    missing = toolchain.record("p", "pip", {"a": {}, "b": {}}, out)
    assert missing["status"] == "failed"
    assert missing["error"] == ("host checks failed: host A has no sb-none — install it "
                                "there (Debian: apt-get install sb-none)")
    assert json.loads(out.read_text())["error"] == missing["error"]
    assert base.toolchain_failure(missing).startswith("pair p: toolchain failed: host checks")

    port = free_port()  # a port nothing listens on
    far = toolchain.record("p", "pip", {"a": {}, "b": {"ssh": "root@127.0.0.1",
                                                        "ssh_port": port}}, out)
    assert far["status"] == "failed"
    assert far["error"].startswith("host checks failed: host B (root@127.0.0.1) cannot be "
                                   "reached"), far["error"]
    assert far["readiness"][-1] == "· p: host B's other checks not run"
