"""A cell's durable files other than its checkpoints, kept in the sweep's storage (`storage:`).

What outlives the machine that trained a cell: its done marker, each attempt's receipt, metric
history and logs. They live in the same storage as the cell's checkpoints (checkpoint/storage_url.py
names it), under the same layout as in a root folder, so that `logs`, `show`, `plot`, `report` and
`export` work from any machine once the one that trained the cell is gone (files.py says how).
"""
