"""`sweepq.Run`: what training code calls, in whichever process runs it.

That is the attempt process for a `train:` cell, the user's own program (`Run.from_env()`)
for a `program:` cell.
"""
