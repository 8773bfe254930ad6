"""How a host's SSH settings and ~/.ssh/config become a connection target, and what a
refused host key says. The transport itself is tested against a real sshd in
tests/integration/test_ssh.py."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess

import paramiko
import pytest

from splitbench.infra import ssh
from splitbench.infra.hosts import Host, HostError, host_from_spec

CONFIG = """
Host bee
  HostName 192.0.2.7
  User bench
  Port 2200
  IdentityFile ~/.ssh/bee_key
  UserKnownHostsFile ~/.ssh/bee_known

Host jump
  HostName 198.51.100.1
  User hop
  IdentityFile ~/.ssh/jump_key

Host inner
  HostName 10.0.0.2
  ProxyJump jump

Host chain
  HostName 10.0.0.3
  ProxyJump alice@first:2022,second

Host loop1
  ProxyJump loop2

Host loop2
  ProxyJump loop1

Host direct
  HostName 10.0.0.4
  ProxyJump none
"""


@pytest.fixture
def config(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("USER", "me")
    monkeypatch.setenv("LOGNAME", "me")
    return paramiko.SSHConfig.from_text(CONFIG)


def test_the_config_gives_hostname_user_port_identity_and_known_hosts(config, tmp_path):
    target = ssh.resolve({"ssh": "bee"}, config)
    assert (target.hostname, target.user, target.port) == ("192.0.2.7", "bench", 2200)
    assert target.identities == (f"{tmp_path}/.ssh/bee_key",)
    assert not target.identities_only
    assert target.known_hosts == (f"{tmp_path}/.ssh/bee_known",)
    assert target.jump is None
    assert str(target) == "bench@192.0.2.7:2200"
    assert target.known_name == "[192.0.2.7]:2200"


def test_the_host_block_overrides_the_config(config, tmp_path):
    target = ssh.resolve({"ssh": "root@bee", "ssh_port": 22, "identity": "/keys/b",
                          "known_hosts": "/keys/known"}, config)
    assert (target.hostname, target.user, target.port) == ("192.0.2.7", "root", 22)
    assert target.identities == ("/keys/b",) and target.identities_only
    assert target.known_hosts == ("/keys/known",)
    assert target.known_name == "192.0.2.7"


def test_an_unconfigured_destination_uses_the_defaults(config, tmp_path):
    target = ssh.resolve({"ssh": "203.0.113.5"}, config)
    assert (target.hostname, target.user, target.port) == ("203.0.113.5", "me", 22)
    assert target.identities == ()  # the agent and ~/.ssh/id_*
    assert target.known_hosts == (f"{tmp_path}/.ssh/known_hosts",)


def test_proxyjump_resolves_the_jump_host_through_the_config(config, tmp_path):
    target = ssh.resolve({"ssh": "inner", "identity": "/keys/b",
                          "known_hosts": "/keys/known"}, config)
    assert target.hostname == "10.0.0.2" and target.identities == ("/keys/b",)
    jump = target.jump
    assert (jump.hostname, jump.user, jump.port) == ("198.51.100.1", "hop", 22)
    assert jump.identities == (f"{tmp_path}/.ssh/jump_key",)  # its own IdentityFile
    assert jump.known_hosts == ("/keys/known",)  # verified against the same file
    assert str(target) == "me@10.0.0.2 via hop@198.51.100.1"


def test_a_proxyjump_chain_goes_through_each_hop_in_order(config):
    target = ssh.resolve({"ssh": "chain", "identity": "/keys/b"}, config)
    second, first = target.jump, target.jump.jump
    assert (second.hostname, second.port, second.jump) == ("second", 22, first)
    assert (first.hostname, first.user, first.port, first.jump) == ("first", "alice", 2022,
                                                                    None)
    assert first.identities == ("/keys/b",)  # no IdentityFile of its own: the host's key
    assert ssh.resolve({"ssh": "direct"}, config).jump is None


def test_a_proxyjump_loop_is_named(config):
    with pytest.raises(ssh.SSHError, match="ProxyJump: more than 8 jumps"):
        ssh.resolve({"ssh": "loop1"}, config)


@pytest.mark.parametrize(("hop", "parsed"), [
    ("jump", (None, "jump", None)),
    ("bob@jump:2022", ("bob", "jump", 2022)),
    ("ssh://bob@jump:2022", ("bob", "jump", 2022)),
    ("[2001:db8::1]:2022", (None, "2001:db8::1", 2022)),
    ("bob@2001:db8::1", ("bob", "2001:db8::1", None)),
])
def test_proxyjump_hops_are_parsed(hop, parsed):
    assert ssh.parse_jump(hop) == parsed


def test_a_bad_hop_is_named():
    with pytest.raises(ssh.SSHError, match="bad port"):
        ssh.parse_jump("jump:ssh")


def test_equal_settings_share_one_target_and_records_stay_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HOME", str(tmp_path))
    host = host_from_spec("b", {"ssh": "bench@192.0.2.7", "ssh_port": 2222,
                                "identity": "keys/b", "known_hosts": "~/known"})
    settings = host.ssh_settings()
    assert settings == {"ssh": "bench@192.0.2.7", "ssh_port": 2222,
                        "identity": f"{tmp_path}/keys/b", "known_hosts": f"{tmp_path}/known"}
    assert json.loads(json.dumps(settings)) == settings
    config = paramiko.SSHConfig()
    assert ssh.resolve(settings, config) == ssh.resolve(dict(settings), config)
    assert hash(ssh.resolve(settings, config))  # a cache key


def test_host_stays_frozen_and_has_no_local_command_line_over_ssh():
    host = Host("b", ssh="bench@192.0.2.7")
    with pytest.raises(dataclasses.FrozenInstanceError):
        host.ssh = "other"  # type: ignore[misc]
    with pytest.raises(HostError, match="host b: no local command line"):
        host.wrap(["true"])
    assert Host("a", netns="ns", cpus="1").wrap(["true"]) == [
        "ip", "netns", "exec", "ns", "taskset", "-c", "1", "true"]
    with pytest.raises(HostError, match="popen is for SSH hosts"):
        Host("a").popen(["true"])


@pytest.fixture(scope="module")
def keys(tmp_path_factory):
    out = []
    for name in ("one", "two"):
        path = tmp_path_factory.mktemp("keys") / name
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)],
                       check=True)
        out.append(paramiko.Ed25519Key.from_private_key_file(str(path)))
    return out


def test_refusals_say_unknown_or_changed_with_fingerprints(keys):
    one, two = keys
    target = ssh.Target("192.0.2.7", 2222, "bench", known_hosts=("/k/known",))
    unknown = ssh.unknown_key_message(target, one)
    assert unknown.startswith("host key unknown: [192.0.2.7]:2222 offered ssh-ed25519 "
                              f"{one.fingerprint}, which is not in known_hosts (/k/known)")
    assert "refused" in unknown and "ssh-keyscan -p 2222 192.0.2.7 >> /k/known" in unknown
    changed = ssh.changed_key_message(target, one, two)
    assert changed.startswith(f"host key changed: [192.0.2.7]:2222 offered ssh-ed25519 "
                              f"{one.fingerprint}, but known_hosts (/k/known) holds "
                              f"ssh-ed25519 {two.fingerprint}")
    assert "refused" in changed
    assert one.fingerprint.startswith("SHA256:") and one.fingerprint != two.fingerprint


def test_the_reject_policy_refuses_and_never_adds(keys):
    client = paramiko.SSHClient()
    policy = ssh._Refuse()
    assert isinstance(policy, paramiko.RejectPolicy)
    with pytest.raises(ssh.UnknownHostKey) as caught:
        policy.missing_host_key(client, "[192.0.2.7]:2222", keys[0])
    assert caught.value.key is keys[0]
    assert len(client.get_host_keys()) == 0


def test_the_ssh_config_is_read_from_home_and_reread_when_changed(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert ssh.load_config().lookup("bee") == {"hostname": "bee"}  # no config: empty
    (tmp_path / ".ssh").mkdir()
    path = tmp_path / ".ssh" / "config"
    path.write_text("Host bee\n  HostName 192.0.2.7\n")
    assert ssh.resolve({"ssh": "bee"}).hostname == "192.0.2.7"
    path.write_text("Host bee\n  HostName 192.0.2.8\n  Port 2201\n")
    os.utime(path, ns=(1, 2))  # a different mtime, whatever the clock's resolution
    target = ssh.resolve({"ssh": "bee"})
    assert (target.hostname, target.port) == ("192.0.2.8", 2201)


@pytest.mark.parametrize("login_shell", ["/bin/sh", "/bin/bash"])
def test_a_remote_command_reaches_sh_exactly_as_its_arguments(login_shell):
    """What a login shell is given runs sh with the arguments unchanged: quotes, spaces,
    newlines, $ and ; included (a shell's own syntax in them is never evaluated)."""
    argv = ["printf", "%s\\n", "a b", "it's", "$HOME; rm -rf x", "two\nlines", "`id`"]
    out = subprocess.run([login_shell, "-c", ssh.remote_command(argv)], capture_output=True,
                         text=True, check=True).stdout
    assert out == "".join(f"{a}\n" for a in argv[2:])
