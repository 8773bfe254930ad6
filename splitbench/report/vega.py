"""Vega for pages that open offline: the Vega, Vega-Lite and Vega-Embed libraries as one
inline script (the report page and each chart's HTML), and a chart's PNG, both from the
Vega-Lite version altair writes.

vl-convert builds that script on request, the same 0.9 MB for a version every time and
seconds of CPU each time a process first asks: it is kept per user, per vl-convert and
Vega-Lite version, under ~/.cache/splitbench/vega, so a run's charts and report jobs
build it at most once on a machine.
"""

from __future__ import annotations

import contextlib
import html
import json
import re
from importlib import metadata
from pathlib import Path
from typing import Any

import altair as alt
import vl_convert

from splitbench.infra import files

# vl-convert's name for the Vega-Lite version altair writes: "v6_4" for "v6.4.1".
VL_VERSION = "_".join(alt.SCHEMA_VERSION.split(".")[:2])


def bundle() -> str:
    """The libraries as one script, safe inside a <script> element."""
    cached = (Path.home() / ".cache/splitbench/vega"
              / f"{metadata.version('vl-convert-python')}-{VL_VERSION}.js")
    try:
        return cached.read_text(encoding="utf-8")
    except OSError:
        pass
    script = vl_convert.javascript_bundle(vl_version=VL_VERSION)
    # Inside a <script> element, only '</script' could end it early.
    script = re.sub(r"</(script)", r"<\\/\1", script, flags=re.IGNORECASE)
    # Whole or not at all (jobs run side by side); a home that cannot be written: built
    # again next time.
    with contextlib.suppress(OSError):
        files.write_text(cached, script)
    return script


def png(spec: dict[str, Any], scale: float) -> bytes:
    return vl_convert.vegalite_to_png(spec, vl_version=VL_VERSION, scale=scale)


def offline_html(spec: dict[str, Any], title: str) -> str:
    """One chart's page: the libraries inlined, the chart drawn as SVG when opened.
    `spec`: strict JSON (no NaN)."""
    data = json.dumps(spec, allow_nan=False).replace("</", "<\\/")
    return ('<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(title)}</title><script>{bundle()}</script></head>"
            '<body><div id="chart"></div><script>vegaEmbed("#chart", '
            f'{data}, {{renderer: "svg"}}).catch(console.error);</script></body></html>')
