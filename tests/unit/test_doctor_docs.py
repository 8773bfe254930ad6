"""What docs/two-machines.md says the doctor checks on host B is what it checks
(links/readiness.py)."""

from __future__ import annotations

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
