"""onetrip's toolchain on a host, run there by its own Python: which Python, and the
hash of the server script the host would run. Prints one JSON object. Standard library
only."""

from __future__ import annotations

import hashlib
import json
import platform
from pathlib import Path

SERVER = Path(__file__).with_name("server.py")


def main() -> None:
    print(json.dumps({"python": platform.python_version(),
                      "server_sha256": hashlib.sha256(SERVER.read_bytes()).hexdigest()}))


if __name__ == "__main__":
    main()
