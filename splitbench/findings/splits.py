"""The backends finding: per model shape and context, which split decodes fastest on
the baseline link, what each moves across the link per token and what each pays per
other link (compare.splits' rows)."""

from __future__ import annotations

import pandas as pd

from splitbench.compare.splits import compare, split_name
from splitbench.findings.text import BACKENDS, Finding, listed, marked


def findings(summary: pd.DataFrame, comp: pd.DataFrame, contexts: list[str],
             baseline_link: str | None) -> list[Finding]:
    """Per shape (and pair) two or more splits measured, per context at one stream on
    the baseline link: which split decodes fastest beyond the ±, or that none does; what
    each moves across the link per token; and what each pays per other link (`comp`:
    comparison.compare_links rows)."""
    rows = compare(summary, contexts, baseline_link)
    rows = rows[(rows["conc"] == 1) & (rows["status"] == "ok")
                & (rows["link"] == baseline_link)]
    out = []
    for (shape, pair), cells in rows.groupby(["model_shape", "pair"], sort=False):
        section = f"Backends: the shape {shape}" + (f" on {pair}" if
                                                    summary["pair"].nunique() > 1 else "")
        for ctx, here in cells.groupby("ctx", sort=False):
            if here["split"].nunique() < 2:
                continue
            head, text = _fastest(here, ctx, baseline_link)
            text += " " + _bytes(here)
            costs = _link_costs(comp, here, ctx)
            if costs:
                text += " " + costs
            flagged = [(f"{split_name(r.split)} {ctx}", str(r.flags).split("; ")[0])
                       for r in here.itertuples() if isinstance(r.flags, str) and r.flags]
            out.append(marked(Finding(section, head, text.rstrip(), (BACKENDS,)), flagged))
    return out


def _fastest(here: pd.DataFrame, ctx: str, link: str | None) -> tuple[str, str]:
    """The headline (which split decodes fastest, or that none does beyond the ±) and
    each split's figure."""
    ranked = here.sort_values("decode_ms_per_token")
    first, second = ranked.iloc[0], ranked.iloc[1]
    gap = second["decode_ms_per_token"] - first["decode_ms_per_token"]
    unc = float(pd.Series([first["decode_ms_unc"], second["decode_ms_unc"]]).pow(2).sum()
                ) ** 0.5
    each = [f"{split_name(r.split)} {r.decode_ms_per_token:.2f}"
            + (f" ±{r.decode_ms_unc:.2f}" if pd.notna(r.decode_ms_unc) else "")
            for r in ranked.itertuples()]
    if pd.notna(unc) and gap > unc:
        head = f"At {ctx} on {link}, {split_name(first['split'])} decodes fastest"
    else:
        head = f"At {ctx} on {link}, no split decodes faster than the next beyond its ±"
    return head, f": {listed(each)} ms/token."


def _bytes(here: pd.DataFrame) -> str:
    moved = [f"{split_name(r.split)} {r.rpc_bytes_per_token_a_to_b:,.0f} A→B and "
             f"{r.rpc_bytes_per_token_b_to_a:,.0f} B→A"
             for r in here.itertuples()
             if pd.notna(r.rpc_bytes_per_token_a_to_b) and pd.notna(r.rpc_bytes_per_token_b_to_a)]
    return f"Per decoded token across the link: {'; '.join(moved)} bytes." if moved else ""


def _link_costs(comp: pd.DataFrame, here: pd.DataFrame, ctx: str) -> str:
    """What each split's decode pays on each other link, from the link comparison."""
    if comp is None or comp.empty:
        return ""
    models = dict(zip(here["model"], here["split"], strict=True))
    mine = comp[comp["model"].isin(models) & (comp["ctx"] == ctx)
                & (comp["status"] == "ok") & (comp["status_base"] == "ok")]
    said = []
    for link, rows in mine.groupby("link", sort=False):
        each = [f"{split_name(models[r.model])} {r.decode_delta_ms:+.2f}"
                + (f" ±{r.decode_delta_unc_ms:.2f}" if pd.notna(r.decode_delta_unc_ms)
                   else "") for r in rows.itertuples()]
        known = rows["decode_resolvable"] if "decode_resolvable" in rows else pd.Series(
            pd.NA, index=rows.index)
        # Said only where each is known to lie inside (a lower-bound ± proves nothing).
        inside = " (none resolvable: each lies inside its ±)" if len(known) and bool(
            known.eq(False).fillna(False).all()) else ""
        said.append(f"on {link} {', '.join(each)}{inside}")
    return f"What each pays per token against the baseline: {'; '.join(said)} ms." \
        if said else ""
