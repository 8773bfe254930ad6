"""onetrip's own model format: a directory holding `vocabulary.json`, the token ids its
front end serves prompts from (a synthetic model's: `n_vocab` ids drawn from its seed)."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Any

FORMAT = "onetrip"
VOCABULARY = "vocabulary.json"


def write(synthetic: dict[str, int], directory: str | Path) -> None:
    ids = random.Random(synthetic.get("seed", 0)).sample(range(1, 1 << 20),
                                                         synthetic["n_vocab"])
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / VOCABULARY).write_text(json.dumps(ids))


def describe(directory: str | Path, synthetic: bool) -> dict[str, Any]:
    data = (Path(directory) / VOCABULARY).read_bytes()
    return {"path": str(Path(directory).resolve()), "synthetic": synthetic,
            "sha256": hashlib.sha256(data).hexdigest(), "backend": "onetrip",
            "header": {"format": FORMAT, "n_vocab": len(json.loads(data))}}
