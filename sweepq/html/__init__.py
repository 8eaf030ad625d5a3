"""`sweepq report --html FILE`: the whole sweep in one self-contained HTML file (no network, no server).

    gather.py    what the page shows, read once from the queue and the metric history
    charts.py    the curves as data: one line per cell, or the best cells with a median and band over many
    reduce.py    a curve cut to a few points, each bucket's min and max kept
    svg.py       a chart as inline SVG
    sections.py  the page's parts, each an HTML string with every user-controlled text escaped
    page.py      the parts in order, the head (a Content-Security-Policy that forbids every fetch), the file

Only `sweepq report --html` imports this package.
"""
