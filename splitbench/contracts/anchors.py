"""Where a reader lands on the report page: the id of each table's, chart's and the
checks' section. The page writes them (report/page.py, report/provenance.py) and the
findings link to them (findings/text.py): one place for both."""

from __future__ import annotations

CHECKS = "checks"


def table(stem: str) -> str:
    """A table's section, by its file stem (report/contents.py: TABLE_STEMS)."""
    return f"table-{stem}"


def chart(name: str) -> str:
    """A chart's section, by its name (report/contents.py: CHARTS)."""
    return f"chart-{name}"
