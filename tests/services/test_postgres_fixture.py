"""The server fixture's rule: in CI a server that cannot start fails the run; elsewhere its tests skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent.parent

CONFTEST = f"""
import sys
sys.path.insert(0, {str(TESTS)!r})
import services.postgres as pg

def _missing():
    raise pg.PostgresUnavailable("PostgreSQL is not installed (made so by the test)")

pg.install = _missing
from services.fixtures import postgres_server  # noqa: F401
"""


@pytest.mark.parametrize("ci", ["true", None])
def test_a_server_that_cannot_start_fails_in_ci_and_skips_elsewhere(tmp_path: Path, ci: str | None) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "test_needs_a_server.py").write_text("def test_it(postgres_server):\n    assert False\n")
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_XDIST_WORKER", "PYTEST_ADDOPTS")}
    if ci is not None:
        env["CI"] = ci
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-ra", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if ci:
        assert r.returncode != 0 and "1 error" in r.stdout, r.stdout
        assert "CI needs a PostgreSQL server" in r.stdout and "made so by the test" in r.stdout
    else:
        assert r.returncode == 0 and "1 skipped" in r.stdout, r.stdout
        assert "no PostgreSQL server: PostgreSQL is not installed (made so by the test)" in r.stdout
