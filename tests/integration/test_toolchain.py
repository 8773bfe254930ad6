import os
import stat

import pytest

from splitbench.backends.llamacpp import toolchain
from splitbench.infra.hosts import Host


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


def test_the_pip_build_has_both_binaries():
    described = toolchain.describe(Host("a"), toolchain.pip_bin_dir(), "pair p")
    assert len(described["ggml-rpc-server_sha256"]) == 64
