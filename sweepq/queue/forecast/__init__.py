"""The forecast: when the sweep and each of its cells will be done, from what the queue saw of their speed.

model.py   the model: cells in claim order on the workers, each at its measured speed (`forecast`)
spans.py   what an attempt showed of its speed (a `Span`), pooled by cell, group and sweep
reads.py   what the forecast reads of the queue (its SQL is queue/queries.py's)
"""
