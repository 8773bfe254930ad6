"""What docs/two-machines.md says the doctor checks on host B is what it checks
(links/readiness.py)."""

from __future__ import annotations

import ast
import re

from splitbench.links import readiness
from tests.conftest import ROOT


def test_the_docs_list_of_host_bs_tools_is_the_doctors():
    text = (ROOT / "docs/two-machines.md").read_text()
    said = re.search(r"The doctor checks for these on host B \(besides its Python\): "
                     r"(.+?)\.(?: |$)", " ".join(text.split()))
    assert said, "docs/two-machines.md no longer lists host B's tools"
    listed = re.findall(r"`([^`]+)`", said.group(1))
    assert listed == [*readiness.TOOLS_B, "nft"]


# What a real pair's code can say that a user must act on (its messages name the pair,
# link and host around these words).
REAL_PAIR_MESSAGES = [
    "refused our keys", "cannot connect to", "holds the default route",
    "has no IPv4 address to adopt", "llama.cpp's ggml-rpc-server binds IPv4 only",
    "different llama.cpp builds", "has no executable", "offers no SFTP",
    "nft could not apply the link guard", "the launch listens beyond the link",
    "sudo -n runs neither", "root-equivalent: sudo runs", "is not this splitbench's",
    "has a listener on host A or host B", "waiting for its turn",
    "before it listened on", "does not run on host", "no packet socket (not root, no packet",
]


def _code_texts() -> str:
    """Every string the package's code holds, an f-string's fields as gaps: Python has
    joined adjacent literals already, so a message split over lines reads whole."""
    texts = []
    for path in (ROOT / "splitbench").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                texts.append(node.value)
            elif isinstance(node, ast.JoinedStr):
                texts.append("\0".join(v.value if isinstance(v, ast.Constant) else ""
                                       for v in node.values))
    return "\n".join(texts)


def test_every_message_a_real_pair_raises_is_in_troubleshooting_with_its_fix():
    code = _code_texts()
    page = " ".join((ROOT / "docs/troubleshooting.md").read_text().split())
    for words in REAL_PAIR_MESSAGES:
        assert words in code, f"the code no longer says {words!r}: update the list"
        assert words in page, f"docs/troubleshooting.md does not say {words!r}"
