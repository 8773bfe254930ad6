"""onetrip's keys in the config: a model's `onetrip:` section."""

from __future__ import annotations

from splitbench.configuration.keys import Section, key


class OneTripModel(Section):
    """What each decoded token sends to host B and back."""

    token_bytes: int = key(8, "bytes each decode step sends to host B (and gets back)",
                           ge=1, le=65536)


MODEL = OneTripModel
