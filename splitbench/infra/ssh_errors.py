"""What reaching a host over SSH can fail with. Apart from infra/ssh.py so that a stage
can name these errors without importing paramiko, which only a remote host needs."""

from __future__ import annotations

from splitbench.errors import SplitbenchError


class SSHError(SplitbenchError):
    """The host could not be reached, or refused us; the message says why."""


class CommandTimeout(SSHError):
    """A remote command ran past its timeout (its channel is closed)."""
