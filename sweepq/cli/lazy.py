"""A click group whose commands are imported only when they run.

Each command is known by name from a table: the module that defines it (and
registers it on the group when imported) and its help's first sentence. `sweepq
--help` lists the commands from the table alone; `sweepq status` imports only
the module of `status`. So the price of a command is what that command needs,
not the import graph of every command (the database layer, the launch machinery,
plotting and export libraries).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import click

_NO_SUCH_COMMAND: Any = getattr(click.exceptions, "NoSuchCommand", None)  # click >= 8.4


@dataclass(frozen=True)
class Lazy:
    """Where a command is defined, and its help's first sentence (what `--help` lists)."""

    module: str
    summary: str


def short_help(summary: str, limit: int) -> str:
    """The line `--help` shows for a command whose help starts with `summary`, as click shortens it."""
    return click.Command(None, help=summary).get_short_help_str(limit)


class LazyGroup(click.Group):
    """A group that imports a command's module on the first request for that command."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, Lazy] = {}

    def add_lazy(self, table: dict[str, Lazy]) -> None:
        self.lazy.update(table)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.lazy) | set(self.commands))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            importlib.import_module(self.lazy[cmd_name].module)  # registers it on this group
            if cmd_name not in self.commands:
                raise RuntimeError(f"{self.lazy[cmd_name].module} does not define the command {cmd_name!r}")
        return self.commands.get(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError as e:
            # click >= 8.4 suggests a close name from the commands imported so far: offer it every name.
            if _NO_SUCH_COMMAND is None or type(e) is not _NO_SUCH_COMMAND:
                raise
            found: Any = e
            raise found.__class__(found.command_name, possibilities=self.list_commands(ctx), ctx=ctx) from None

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click lists them, from the table for the commands not imported (their help is not needed)."""
        names = [n for n in self.list_commands(ctx) if n not in self.commands or not self.commands[n].hidden]
        if not names:
            return
        limit = formatter.width - 6 - max(len(n) for n in names)  # click's own spacing
        rows = [(n, self._short_help(n, limit)) for n in names]
        with formatter.section("Commands"):
            formatter.write_dl(rows)

    def _short_help(self, name: str, limit: int) -> str:
        command = self.commands.get(name)
        if command is not None:
            return command.get_short_help_str(limit)
        return short_help(self.lazy[name].summary, limit)
