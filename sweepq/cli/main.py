"""The `sweepq` command: parse, call the domain, render. Read commands never write.

Each command lives with its kind (run_commands, read_commands, report_commands, log_commands,
steer_commands, session_commands, repair_commands, export_commands, plot_commands) and registers
itself on the click group of app.py when its module is imported. The group imports that module
only when the command runs: COMMANDS names every command, its module and its help's first
sentence, which is all `sweepq --help` needs (tests/unit/test_cli_imports.py holds the table
to the commands themselves).
"""

from sweepq.cli.app import main
from sweepq.cli.lazy import Lazy

_RUN, _READ, _STEER = "sweepq.cli.run_commands", "sweepq.cli.read_commands", "sweepq.cli.steer_commands"

COMMANDS = {
    "attempts": Lazy(_READ, "Every attempt's receipt, newest first."),
    "best": Lazy(
        _READ, "Per cell, the best metric, the cfg keys that vary and the checkpoint that holds it; winners first."
    ),
    "cancel": Lazy(_STEER, "Cancel CELLS; a running one is first preempted gracefully by its worker."),
    "export": Lazy(
        "sweepq.cli.export_commands", "Write a sweep's results in formats other tools read (the root is only read)."
    ),
    "launch": Lazy(_RUN, "Run the sweep in SPEC until every cell is done, failed or cancelled (safe to repeat)."),
    "logs": Lazy(
        "sweepq.cli.log_commands",
        "What an attempt of CELL printed: its stdout.log and stderr.log, each under a header.",
    ),
    "plan": Lazy(_RUN, "Expand SPEC and list its cells in run order (touches nothing on disk)."),
    "plot": Lazy(
        "sweepq.cli.plot_commands", "Draw each cell's metric curve, stitched across resumes, into FILE (.png or .svg)."
    ),
    "repair": Lazy(
        "sweepq.cli.repair_commands",
        "Move a damaged database aside and rebuild the queue from the sweep file and the cells' files.",
    ),
    "report": Lazy(
        "sweepq.cli.report_commands",
        "Where the hours went: attempts, wall and GPU hours, and steps lost, per termination reason; then what "
        "matters in the grid: per cfg key, the metric's mean for each value and the key's share of its variance, "
        "keys ranked.",
    ),
    "reset": Lazy(_STEER, "Start CELLS over from scratch; their checkpoints, DONE.json and output/ move to the attic."),
    "retry": Lazy(_STEER, "Requeue failed or cancelled CELLS with a fresh retry budget."),
    "show": Lazy(_READ, "One cell: cfg, attempts (receipts), checkpoints with their metrics, history."),
    "status": Lazy(
        _READ,
        "Every cell at a glance: state, progress, the cfg keys that vary, metrics, attempts, why a cell failed.",
    ),
    "stop": Lazy(
        "sweepq.cli.session_commands",
        "Stop the sweep's live launch gracefully (as a first Ctrl-C: running cells checkpoint) and wait for it.",
    ),
    "worker": Lazy(_RUN, "Run one worker on an existing sweep root (for other machines and schedulers)."),
}

main.add_lazy(COMMANDS)

__all__ = ["COMMANDS", "main"]

if __name__ == "__main__":
    main()
