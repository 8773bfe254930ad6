"""Host A as an ordinary user would have it: splitbench run by a user who is not root,
whose only rights are a sudoers line and the packet helper root installed for it.

The user exists only inside the mount namespaces its commands run in: each command is
started by root in a mount namespace of its own where /etc/passwd, /etc/shadow and
/etc/group carry the user, /etc/sudoers.d holds only what the test granted, and
/usr/local/libexec and /usr/local/sbin are directories of the test's (where the packet
helper and the root helper are installed);
then it drops to the user with setpriv. Nothing of this machine's own files changes.
Directories on the way to the test's Python that only root may enter (/root, where
pyenv puts it) are shadowed by ones any user may, holding just that way through.

    user = OrdinaryUser.make(tmp_dir)
    user.run(["python", "-m", "splitbench", "doctor"], cwd=work)
    user.grant("alice ALL=(root) NOPASSWD: /usr/bin/ip")
    user.run([...], as_root_first=[[sys.executable, "-m", "splitbench", "packet-helper",
                                    "--user", user.name]])
"""

from __future__ import annotations

import os
import shlex
import stat
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from splitbench.infra import packet_helper
from tests.conftest import ROOT

NAME, UID = "alice", 4242
# The test's own directories under /usr/local, where root installs the user's helpers.
OWN_DIRS = ("libexec", "sbin")


@dataclass(frozen=True)
class OrdinaryUser:
    base: Path  # every file of the user's world; any user may enter it
    name: str = NAME
    uid: int = UID

    @property
    def home(self) -> Path:
        return self.base / "home"

    @classmethod
    def make(cls, base: Path) -> OrdinaryUser:
        user = cls(base)
        base.chmod(0o755)
        user.home.mkdir(mode=0o755)
        os.chown(user.home, UID, UID)
        etc = base / "etc"
        etc.mkdir()
        for name, line, mode in (
                ("passwd", f"{NAME}:x:{UID}:{UID}:{NAME}:{user.home}:/bin/sh", 0o644),
                # "*": no password, not locked (sudo refuses a locked account).
                ("shadow", f"{NAME}:*:19000:0:99999:7:::", 0o640),
                # The packet helper's group, as root's install leaves it.
                ("group", f"{NAME}:x:{UID}:\n{packet_helper.GROUP}:x:{UID + 2}:{NAME}",
                 0o644)):
            (etc / name).write_text(Path(f"/etc/{name}").read_text() + line + "\n")
            (etc / name).chmod(mode)
        (etc / "sudoers.d").mkdir(mode=0o755)
        local = base / "usr-local"
        for entry in ("libexec", "sbin", *(p.name for p in Path("/usr/local").iterdir())):
            (local / entry).mkdir(parents=True, exist_ok=True)
        return user

    def own(self, *paths: Path) -> None:
        """Give the user these files and directories (recursively)."""
        subprocess.run(["chown", "-R", f"{UID}:{UID}", *map(str, paths)], check=True)

    def grant(self, sudoers_line: str) -> None:
        """The user's sudoers file, holding this line alone."""
        path = self.base / "etc/sudoers.d/splitbench"
        path.write_text(sudoers_line.rstrip("\n") + "\n")
        path.chmod(0o440)

    def run(self, argv: Sequence[str], cwd: Path, timeout: float = 900,
            as_root_first: Sequence[Sequence[str]] = ()) -> subprocess.CompletedProcess:
        """argv as the user in `cwd` (its environment: HOME, USER and a PATH that starts
        with the test's venv), after `as_root_first` as root in the same namespace."""
        env = {"HOME": str(self.home), "USER": NAME, "LOGNAME": NAME,
               "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}
        script = "\n".join([
            "set -e", *self._mounts(),
            *(shlex.join(command) for command in as_root_first),
            shlex.join(["exec", "setpriv", f"--reuid={UID}", f"--regid={UID}",
                        "--init-groups", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
                        *argv])])
        return subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                               script], cwd=cwd, capture_output=True, text=True,
                              timeout=timeout)

    def _mounts(self) -> list[str]:
        etc, local = self.base / "etc", self.base / "usr-local"
        lines = [f"mount --bind {etc}/{name} /etc/{name}"
                 for name in ("passwd", "shadow", "group", "sudoers.d")]
        lines += [f"mount --bind /usr/local/{p.name} {local}/{p.name}"
                  for p in Path("/usr/local").iterdir() if p.is_dir() and p.name not in
                  OWN_DIRS]
        lines.append(f"mount --rbind {local} /usr/local")
        for path in (Path(os.path.realpath(sys.executable)), ROOT / ".venv"):
            lines += self._way_through(path)
        return lines

    def _way_through(self, path: Path) -> list[str]:
        """Mounts that let any user reach `path` where an ancestor lets only its owner
        enter: that ancestor shadowed by a directory holding only the next step."""
        for ancestor in list(reversed(path.parents))[1:]:
            if ancestor.stat().st_mode & stat.S_IXOTH:
                continue
            step = path.relative_to(ancestor).parts[0]
            shadow = self.base / "shadow" / ancestor.relative_to("/")
            (shadow / step).mkdir(parents=True, exist_ok=True)
            for part in (shadow, *shadow.parents):
                if part == self.base:
                    break
                part.chmod(0o755)
            return [f"mount --bind {ancestor / step} {shadow / step}",
                    f"mount --rbind {shadow} {ancestor}"]
        return []
