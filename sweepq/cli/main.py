"""The `sweepq` command: parse, call the domain, render. Read commands never write.

Each command lives with its kind (run_commands, read_commands, report_commands, log_commands, steer_commands,
session_commands, repair_commands, export_commands, plot_commands); importing them registers them on
the click group defined in app.py.
"""

from sweepq.cli import (
    export_commands,
    log_commands,
    plot_commands,
    read_commands,
    repair_commands,
    report_commands,
    run_commands,
    session_commands,
    steer_commands,
)
from sweepq.cli.app import main

__all__ = [
    "export_commands",
    "log_commands",
    "main",
    "plot_commands",
    "read_commands",
    "repair_commands",
    "report_commands",
    "run_commands",
    "session_commands",
    "steer_commands",
]

if __name__ == "__main__":
    main()
