"""The page: its sections in order, a head that forbids every fetch, a style, a few lines of script; the file.

The page is one file that needs nothing else: no network, no font, no library. Its
Content-Security-Policy forbids every fetch (images only from data: URIs, styles and
scripts only inline), so even a value in a cfg that slipped past escaping could not
reach out. The script only sorts tables: with scripts off the page reads the same.
The file is written beside its name and renamed over it: a reader never sees half.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Sequence
from html import escape
from pathlib import Path

from sweepq.atomic import atomic_write_bytes, tmp_name
from sweepq.errors import UsageError
from sweepq.html import sections
from sweepq.html.gather import Report
from sweepq.html.grid_section import grid
from sweepq.html.svg import PALETTE, lighter

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"
SUFFIXES = (".html", ".htm")

Section = Callable[[Report], str]
#: The page, top to bottom: each a function of the report returning HTML.
SECTIONS: list[Section] = [sections.header, sections.status, sections.curves, grid, sections.hours, sections.failed]

_COLOURS = "".join(
    f".p{i}{{stroke:{c};background:{c}}}circle.p{i}{{fill:{c}}}.q{i}{{stroke:{lighter(c)}}}"
    for i, c in enumerate(PALETTE)
)
STYLE = (
    "body{font:14px/1.45 system-ui,sans-serif;margin:0 auto;max-width:1500px;padding:0 20px 40px;color:#222}"
    "nav{position:sticky;top:0;z-index:2;background:#fff;padding:6px 0;border-bottom:1px solid #ddd}"
    "nav a{margin-right:16px}h1{margin:14px 0 4px}h2{margin:28px 0 8px;border-bottom:1px solid #ddd}"
    "header p{margin:2px 0}code{font:12px ui-monospace,monospace;background:#f3f3f3;padding:1px 3px}"
    "table{border-collapse:collapse;font-size:13px;font-variant-numeric:tabular-nums}"
    "th,td{padding:3px 9px;border-bottom:1px solid #eee;text-align:left;white-space:nowrap;vertical-align:top}"
    "th{background:#f7f7f7;position:sticky;top:0}.sortable th{cursor:pointer}"
    'th[aria-sort=ascending]::after{content:" \\25B2"}th[aria-sort=descending]::after{content:" \\25BC"}'
    ".scroll{max-height:75vh;overflow:auto;border:1px solid #ddd}details{margin:6px 0}"
    ".sw{display:inline-block;width:10px;height:10px;margin-right:6px;border-radius:2px}"
    ".s-done{color:#2a7d2a}.s-failed{color:#c0392b}.s-running{color:#1f6fb4}.s-interrupted{color:#b7791f}"
    ".s-cancelled,.s-queued{color:#666}.warn{color:#a40}.dash{border-bottom:2px dashed #888}"
    ".charts{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:14px}"
    "figure{margin:0;border:1px solid #e3e3e3;padding:8px}figcaption{font-size:13px;margin-bottom:4px}"
    ".legend{font-size:12px;margin:4px 0 0}.legend i{margin-left:10px}"
    "svg{width:100%;height:auto;display:block}figure.pc{max-width:900px;margin-top:8px}"
    ".ax path{fill:none;stroke:#999}.ax path.g{stroke:#eee}"
    ".ax text{font-size:11px;fill:#555;text-anchor:middle}.ax text.y,.ax text.r{text-anchor:end}"
    "path.c,path.t,path.k{fill:none;stroke-linecap:round;stroke-linejoin:round}"
    "path.c{stroke-width:1.5}path.c:hover{stroke-width:3.5}path.t{stroke-width:1.5;stroke-dasharray:4 3}"
    "path.k{stroke-width:5}circle.b{stroke:#000;stroke-width:1}"
    "path.band{fill:#888;fill-opacity:.28;stroke:none}path.median{fill:none;stroke:#000;stroke-width:1.8}"
    f"{_COLOURS}"
)
# Sorts a table by the column whose name is clicked (numbers by value where the column is marked "n");
# empty cells go last either way.
SCRIPT = """
for (const t of document.querySelectorAll("table.sortable")) {
  t.tHead.addEventListener("click", (ev) => {
    const th = ev.target.closest("th");
    if (!th) return;
    const i = th.cellIndex, num = th.classList.contains("n"), body = t.tBodies[0];
    const up = th.getAttribute("aria-sort") !== "ascending";
    for (const h of th.parentNode.cells) h.removeAttribute("aria-sort");
    th.setAttribute("aria-sort", up ? "ascending" : "descending");
    const key = (r) => { const s = r.cells[i] ? r.cells[i].textContent : ""; return num ? parseFloat(s) : s; };
    const none = (k) => (num ? isNaN(k) : k === "");
    const rows = Array.from(body.rows, (r) => [key(r), r]);
    rows.sort((a, b) => {
      if (none(a[0]) || none(b[0])) return none(a[0]) - none(b[0]);
      const c = num ? a[0] - b[0] : a[0].localeCompare(b[0], undefined, { numeric: true });
      return up ? c : -c;
    });
    const moved = document.createDocumentFragment();
    for (const x of rows) moved.appendChild(x[1]);
    body.appendChild(moved);
  });
}
"""


def page(report: Report, parts: Sequence[Section] = SECTIONS) -> str:
    """The whole HTML document."""
    body = [part(report) for part in parts]
    name = escape(report.settings.name)
    return (
        "<!doctype html>\n<html lang=en><head><meta charset=utf-8>"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>{name} · sweepq report</title><style>{STYLE}</style></head>\n<body>"
        f"{_nav(name, body)}{''.join(body)}<script>{SCRIPT}</script></body></html>\n"
    )


_SECTION = re.compile(r'<section id="([^"]+)"><h2>([^<]+)</h2>')


def _nav(name: str, body: Sequence[str]) -> str:
    """Links to every section, as the sections name themselves."""
    links = "".join(f'<a href="#{m[1]}">{m[2]}</a>' for part in body for m in _SECTION.finditer(part[:300]))
    return f"<nav><b>{name}</b> · {links}</nav>"


def output(path: Path) -> Path:
    """FILE, refused before anything is read unless it is an .html file in a folder this user may write."""
    if path.suffix.lower() not in SUFFIXES:
        raise UsageError(
            f"{path}: sweepq report --html writes an HTML page and replaces FILE whole, so FILE must end in "
            ".html (or .htm): name it, for example, report.html"
        )
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise UsageError(f"no folder {folder} to write {path.name} into: create it, or name a FILE in one that exists")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write into {folder}: permission denied. Name a FILE in a folder this user may write")
    if path.is_dir():
        raise UsageError(f"{path} is a folder: name the page FILE.html")
    _probe(path)
    return path


def _probe(path: Path) -> None:
    """Create and remove an empty file beside FILE: a folder where nothing can be created (a read-only mount,
    /proc, a full disk's inodes) is refused before the root is read, whatever os.access says of it."""
    probe = tmp_name(path)
    try:
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        os.unlink(probe)
    except OSError as e:
        raise UsageError(_cannot_write(path, e)) from e


def _cannot_write(path: Path, e: OSError) -> str:
    return (
        f"cannot create {path.name} in {path.parent if str(path.parent) else '.'}: {e.strerror or e}. "
        "Name a FILE in a folder this user may write (nothing was written)"
    )


def write(path: Path, report: Report) -> int:
    """The page written to `path` (beside it first, then renamed over it); its size in bytes."""
    data = page(report).encode("utf-8")
    try:
        atomic_write_bytes(path, data)
    except OSError as e:  # the folder changed since the probe, or the disk filled: the page is not half-written
        raise UsageError(_cannot_write(path, e)) from e
    return len(data)
