"""The one base of splitbench's own errors: a problem with the input, the hosts or the
servers that its message names well enough for a person to act on (the command line
prints it as `error: …` and exits 2, with no traceback). Anything else is a bug."""

from __future__ import annotations


class SplitbenchError(RuntimeError):
    """A problem splitbench names: a config key, a host, a file, a server."""
