"""The attempt process (`python -m sweepq.attempt <attempt.json>`): one attempt of one cell.

It runs a `train:` cell's function in-process, or supervises a `program:` cell's program
(sweepq.program), and writes DONE.json and the receipt.
"""
