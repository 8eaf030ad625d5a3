"""Callbacks that make a cell of a training library's own loop a first-class sweepq cell.

Each is one line in the user's script and a no-op when the script runs outside
sweepq. The library keeps its own checkpoint format; sweepq keeps those files
as verified checkpoints (Run.commit_files) and hands back the one to resume
from (Run.resume_path). Optional dependencies: `pip install sweepq[lightning]`,
`pip install sweepq[transformers]`.
"""
