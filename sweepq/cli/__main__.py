"""`python -m sweepq.cli`: the same as the `sweepq` command."""

from sweepq.cli.main import main

main()
