"""The sudoers line the doctor prints, on a host B that is another machine
(tests/support/separate_host.py): it names the root helper alone, and what an attacker with B's
user would try through it (a root shell, a file read through nft, another run's
table deleted, the firewall flushed) is refused, while a link's change goes through."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from splitbench.infra import privilege
from splitbench.infra.hosts import host_from_spec
from tests.support.separate_host import config_block, separate_host_b  # noqa: F401 (a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.root]
THEIRS = "splitbench_00000000cc"  # another user's run's table on B


def as_root_on_b(b: dict, *argv: str, uid: int | None = None) -> str:
    """argv as B's root, in B's namespaces (as sudo would run it for `uid`)."""
    env = ["env", f"SUDO_UID={uid}"] if uid is not None else []
    done = subprocess.run(["nsenter", "-t", str(b["init_pid"]), "-m", "-n", "-p", "-u", "-r",
                           "-w", "--", *env, *argv], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, (argv, done.stderr)
    return done.stdout


def test_the_helper_line_cannot_open_a_shell_read_a_file_or_flush_another_table(
        separate_host_b):  # noqa: F811 (the fixture)
    b = separate_host_b(sudoers=f"bench ALL=(root) NOPASSWD: {privilege.HELPER}")
    host = host_from_spec("b", config_block(b))
    # Installed as the doctor says: root copies the one the doctor put in bench's home.
    subprocess.run(["chroot", b["root"], "sh", "-c", privilege.helper_install(host)],
                   check=True)
    assert privilege.helper_state(host) == "ready"
    spec = {"interfaces": [b["interface_b"]], "addresses": [b["addr_b"]],
            "ports": ["20480-20607"]}
    as_root_on_b(b, "/usr/bin/python3", "-I", privilege.HELPER, "guard-apply", THEIRS,
                 json.dumps(spec), uid=1001)
    ruleset = as_root_on_b(b, "nft", "list", "ruleset")
    assert THEIRS in ruleset

    def through_sudo(*argv: str) -> subprocess.CompletedProcess:
        return host.run(["sudo", "-n", *argv], check=False)

    # No shell: not through the helper, and nothing but the helper through sudo.
    for argv in ([privilege.HELPER, "netns", "exec", "x", "/bin/sh", "-c", "id"],
                 [privilege.HELPER, "link-up", "x; /bin/sh"]):
        refused = through_sudo(*argv)
        assert refused.returncode == 2 and "splitbench-root: refused:" in refused.stderr
    for argv in (["/usr/sbin/ip", "netns", "add", "x"], ["/bin/sh", "-c", "id"],
                 ["/usr/sbin/nft", "flush", "ruleset"]):
        refused = through_sudo(*argv)
        assert refused.returncode == 1 and "a password is required" in refused.stderr
    # No file read: nft is given rules the helper built, never a path.
    for argv in ([privilege.HELPER, "guard-apply", "splitbench_00000000dd", "-f /etc/shadow"],
                 [privilege.HELPER, "guard-apply", "splitbench_00000000dd",
                  json.dumps({**spec, "interfaces": ['x" }; include "/etc/shadow']})],
                 [privilege.HELPER, "addr-replace", b["interface_b"], "/etc/shadow"]):
        refused = through_sudo(*argv)
        said = refused.stdout + refused.stderr
        # Refused by name, and no line of /etc/shadow in what came back.
        assert refused.returncode == 2 and "splitbench-root: refused:" in said
        assert not re.search(r"(?m)^(root|bench):", said), said
    # Another run's table is neither deleted nor replaced, and no other table is touched.
    for argv in ([privilege.HELPER, "guard-delete", THEIRS],
                 [privilege.HELPER, "guard-apply", THEIRS, json.dumps(spec)],
                 [privilege.HELPER, "guard-delete", "filter"]):
        refused = through_sudo(*argv)
        assert refused.returncode == 2, refused
    assert as_root_on_b(b, "nft", "list", "ruleset") == ruleset
    # What a link needs goes through, and only to the interface it names.
    mtu = json.loads(host.run(["ip", "-j", "link", "show", "dev", b["interface_b"]]).stdout)[0]
    assert through_sudo(privilege.HELPER, "mtu", b["interface_b"], "1400").returncode == 0
    now = json.loads(host.run(["ip", "-j", "link", "show", "dev", b["interface_b"]]).stdout)[0]
    assert now["mtu"] == 1400
    assert through_sudo(privilege.HELPER, "mtu", b["interface_b"],
                        str(mtu["mtu"])).returncode == 0
