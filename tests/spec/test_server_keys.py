"""`database:` and `lease:` in the sweep file, and how a database URL is chosen, filled in and shown."""

from __future__ import annotations

import textwrap

import pytest

from sweepq.errors import SpecError, UsageError
from sweepq.queue.database_url import ENV_DATABASE, choose, expanded, redacted
from sweepq.spec.sweep import parse_sweep
from sweepq.spec.types import LeaseTerms

BASE = """\
name: s
train: m:f
grid: {lr: [1, 2]}
"""
URL = "postgresql+psycopg://alice:${envvar:PGPASS}@db.lab:5432/sweeps"


def parse(extra: str):
    return parse_sweep(BASE + textwrap.dedent(extra), "sweep.yaml")


def error_of(extra: str) -> str:
    with pytest.raises(SpecError) as caught:
        parse(extra)
    return str(caught.value)


def test_database_is_kept_as_written_and_lease_has_defaults() -> None:
    sweep = parse(f"database: '{URL}'\n")
    assert sweep.database == URL  # the placeholder stays: nothing secret in the parsed sweep
    assert sweep.lease == LeaseTerms(5.0, 30.0)
    assert parse("").database is None
    assert parse("lease: {renew_seconds: 2, expire_seconds: 12}\n").lease == LeaseTerms(2.0, 12.0)


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("database: 3\n", "database: expected a database URL"),
        ("database: 'mysql://u@h/d'\n", "runs on SQLite and PostgreSQL, not mysql"),
        ("database: 'not a url'\n", "is not a database URL"),
        ("database: 'postgresql://u:${env:X}@h/d'\n", "is not a placeholder sweepq knows"),
        ("lease: 5\n", "lease: expected a mapping"),
        ("lease: {renew: 5}\n", "unknown key 'renew' in lease"),
        ("lease: {renew_seconds: 0}\n", "lease.renew_seconds: expected a number above 0"),
        ("lease: {renew_seconds: 30, expire_seconds: 30}\n", "would expire between two renewals"),
    ],
)
def test_bad_server_keys_are_refused_by_name(extra: str, words: str) -> None:
    assert words in error_of(extra)


def test_a_literal_password_is_never_in_a_refusal() -> None:
    assert "hunter2" not in error_of("database: 'oracle://bob:hunter2@h/d'\n")


def test_the_command_line_wins_then_the_environment_then_the_file() -> None:
    env = {ENV_DATABASE: "postgresql://env@h/d"}
    assert choose("postgresql://cli@h/d", env, URL).source == "--database"  # type: ignore[union-attr]
    assert choose(None, env, URL).raw == "postgresql://env@h/d"  # type: ignore[union-attr]
    chosen = choose(None, {}, URL, "sweep.yaml")
    assert chosen is not None and chosen.source == "database: in sweep.yaml"
    assert choose(None, {ENV_DATABASE: ""}, None) is None  # the root's SQLite file
    with pytest.raises(UsageError, match="SWEEPQ_DATABASE_URL: sweepq's queue runs on SQLite and PostgreSQL"):
        choose(None, {ENV_DATABASE: "mysql://h/d"}, None)


def test_placeholders_are_filled_in_only_to_connect_and_quoted_in_the_password() -> None:
    assert expanded(URL, {"PGPASS": "p@ss/w:rd"}) == "postgresql+psycopg://alice:p%40ss%2Fw%3Ard@db.lab:5432/sweeps"
    host = "postgresql://u@${envvar:HOST}/${envvar:DB}"
    assert expanded(host, {"HOST": "db.lab:5433", "DB": "x"}) == "postgresql://u@db.lab:5433/x"
    with pytest.raises(UsageError, match=r"names \$\{envvar:PGPASS\}, but the environment variable PGPASS is not set"):
        expanded(URL, {})


def test_what_is_shown_keeps_placeholders_and_hides_literal_passwords() -> None:
    assert redacted(URL) == URL
    assert redacted("postgresql://bob:hunter2@h/d") == "postgresql://bob:***@h/d"
    assert redacted("postgresql://bob@h/d") == "postgresql://bob@h/d"
    assert redacted("sqlite:////tmp/x.db") == "sqlite:////tmp/x.db"
    chosen = choose("postgresql+psycopg://bob:hunter2@h:5432/d?sslmode=require", {}, None)
    assert chosen is not None and "hunter2" not in chosen.shown and chosen.shown.endswith("@h:5432/d?sslmode=require")
