"""The page's "What matters" section: the exact grid analysis (analysis/grid.py) and its parallel coordinates.

The same analyses as `sweepq report` prints: per group of the sweep, its cfg keys
ranked by the share of the metric's variance their values explain, each value's
mean ± std over the cells that have it, the best value in bold; then the parallel
coordinates picture, one line per cell (analysis/parallel.py: an SVG of its own,
no script, no reference outside the page).
"""

from __future__ import annotations

from sweepq.analysis.grid import GridAnalysis, KeyEffect, analyse, best_level, nothing_to_analyse
from sweepq.analysis.parallel import parallel_svg
from sweepq.html.gather import Report
from sweepq.html.sections import e
from sweepq.results.params import full


def grid(r: Report) -> str:
    """One block per analysed group, or one line saying why there is nothing to analyse."""
    cells = [c for c in r.cells if not c.removed]
    analyses = analyse(cells, r.settings.metric)
    body = "".join(_analysis(a) for a in analyses) or f"<p>{e(nothing_to_analyse(cells, r.settings.metric))}</p>"
    return f'<section id="grid"><h2>What matters</h2>{body}</section>'


def _analysis(a: GridAnalysis) -> str:
    better = "higher" if a.goal == "max" else "lower"
    where = f" in group {e(a.group)}" if a.group else ""
    kind = "a full grid" if a.full else "a partial grid"
    note = f'<p class="warn">{e(a.note)}</p>' if a.note else ""
    rows = "".join(_key_rows(k, a) for k in a.keys)
    return (
        f"<h3>{e(a.metric)} ({better} is better){where}: {a.cells} cells, {kind}</h3>{note}"
        "<p>Each value's mean ± std of the metric over the cells that have it; a key's share is the part of "
        "the metric's variance its values explain (exact over a full grid), its spread the distance between "
        "its best and worst means.</p>"
        "<table><thead><tr><th>key<th>share<th>spread<th>value<th>mean ± std<th>n</tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        f'<figure class="pc">{parallel_svg(a)}</figure>'
    )


def _key_rows(k: KeyEffect, a: GridAnalysis) -> str:
    best = best_level(k, a.goal) if k.levels else None
    out = []
    for i, v in enumerate(k.levels):
        head = f"<td>{e(k.key)}<td>{k.share:.0%}<td>{e(f'{k.spread:.4g}')}" if i == 0 else "<td><td><td>"
        mean = f"{v.mean:.4g} ± {v.std:.2g}"
        mean = f"<b>{e(mean)}</b>" if v is best else e(mean)
        out.append(f"<tr>{head}<td>{e(full(v.value))}<td>{mean}<td>{v.n}</tr>")
    return "".join(out)
