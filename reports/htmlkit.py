"""The HTML building blocks of report.html and index.html: escaping, tables, the page shell.

Every text that reaches a page goes through :func:`esc` unless it is :class:`Raw` (markup this
package built itself), so a reason, a label or an error message from a run can never inject
markup into a report.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from inferchaos.reports.verdict_schema import Status

STATUS_COLOURS: dict[Status, str] = {
    Status.PASSED: "#15803d",
    Status.FAILED: "#b91c1c",
    Status.ABORTED: "#b45309",
    Status.ERROR: "#6b21a8",
    Status.SKIPPED: "#4b5563",
}

# The page loads nothing: this policy makes a browser refuse (and log) any request a future
# change might add, so "self-contained" is enforced where the report is viewed, not hoped for.
CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"

CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #111827;
       margin: 0 auto; max-width: 1200px; padding: 0 16px 48px; background: #fff; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #e5e7eb; padding-bottom: 4px; }
h3 { font-size: 14px; margin: 16px 0 6px; }
.banner { color: #fff; padding: 16px 20px; margin: 16px 0; border-radius: 6px; }
.banner .status { font-weight: 700; letter-spacing: .06em; text-transform: uppercase; }
.banner p { margin: 4px 0; }
table { border-collapse: collapse; margin: 6px 0 10px; }
th, td { border: 1px solid #e5e7eb; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f3f4f6; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.time { white-space: nowrap; }
.state { font-weight: 600; padding: 1px 6px; border-radius: 3px; white-space: nowrap; }
.state-ok, .state-passed { background: #dcfce7; color: #14532d; }
.state-breached, .state-failed { background: #fee2e2; color: #7f1d1d; }
.state-no-data, .state-aborted { background: #fef3c7; color: #78350f; }
.state-not-run, .state-no-slo { background: #f3f4f6; color: #4b5563; }
.state-error { background: #f3e8ff; color: #581c87; }
figure.plot { margin: 12px 0 20px; }
figure.plot figcaption { font-weight: 600; margin-bottom: 4px; }
figure.plot svg { max-width: 100%; height: auto; }
.nodata { color: #6b7280; font-style: italic; border: 1px dashed #d1d5db; padding: 10px; margin: 0; }
.muted { color: #6b7280; }
code { font-size: 12px; background: #f3f4f6; padding: 0 3px; border-radius: 3px; word-break: break-all; }
.spark { vertical-align: middle; }
.cells span { display: inline-block; width: 18px; height: 18px; margin-right: 2px; border-radius: 3px;
              color: #fff; font-size: 11px; text-align: center; line-height: 18px; }
"""


class Raw(str):
    """Markup this package built and escaped itself; :func:`esc` passes it through unchanged."""


def esc(value: object) -> Raw:
    """``value`` as HTML text, escaped unless it is already :class:`Raw`."""
    if isinstance(value, Raw):
        return value
    return Raw(html.escape(str(value), quote=True))


def join(parts: Iterable[object]) -> Raw:
    """Concatenate escaped parts."""
    return Raw("".join(esc(p) for p in parts))


def tag(name: str, content: object = "", **attrs: object) -> Raw:
    """``<name attrs>content</name>``; attribute ``cls`` becomes ``class``, None drops it."""
    rendered = "".join(
        f' {"class" if key == "cls" else key.replace("_", "-")}="{esc(value)}"'
        for key, value in attrs.items()
        if value is not None
    )
    return Raw(f"<{name}{rendered}>{esc(content)}</{name}>")


def state(text: str) -> Raw:
    """A coloured marker such as ``ok``, ``breached``, ``not run``, ``passed``."""
    return tag("span", text, cls=f"state state-{text.lower().replace(' ', '-')}")


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[object]],
    *,
    numeric: Sequence[int] = (),
    times: Sequence[int] = (),
    **attrs: object,
) -> Raw:
    """A table; columns whose index is in ``numeric`` are right-aligned, those in ``times`` never wrap."""

    def cls(index: int) -> str | None:
        return "num" if index in numeric else ("time" if index in times else None)

    head = tag("tr", join(tag("th", h) for h in headers))
    body = join(tag("tr", join(tag("td", cell, cls=cls(i)) for i, cell in enumerate(row))) for row in rows)
    return tag("table", join([tag("thead", head), tag("tbody", body)]), **attrs)


def definitions(pairs: Iterable[tuple[str, object]], **attrs: object) -> Raw:
    """A two-column table of names and values."""
    rows = join(tag("tr", join([tag("th", name), tag("td", value)])) for name, value in pairs)
    return tag("table", tag("tbody", rows), **attrs)


def page(title: str, body: object) -> str:
    """A complete, self-contained HTML document."""
    return (
        "<!DOCTYPE html>\n"
        '<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n"
        f"<body>\n{esc(body)}\n</body></html>\n"
    )
