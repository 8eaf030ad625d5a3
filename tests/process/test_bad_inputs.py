"""Bad input through the real `sweepq` command: one paragraph naming the problem, exit 2, no traceback.

Each case is a real process on a real root (tiny_sweep.py's finished sweep, copied):
a W&B file whose int_uniform range holds 2**63 values, a cell selector longer than a
file name may be, `logs --attempt` beyond SQLite's integers, `report --html` into a
folder where nothing can be created, and `repair` of a root holding an attempt
folder numbered beyond what SQLite counts (the next attempt must fit too: 2**63 - 2 is
the highest folder repair takes, and it stays an integer). A history file holding
numbers out of range (a step of 10**26, a time of 1e999, a bare value of 1e999) is
not refused: the exports skip those lines and say how many in one line, and no
`inf` reaches metrics.csv.
"""

from __future__ import annotations

import csv
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from conftest import cli, write
from tiny_sweep import finished

from sweepq.layout import CellPaths

pytestmark = pytest.mark.process


@pytest.fixture
def sweep(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> Path:
    """A copy of the folder of tiny.yaml (root runs/tiny: cells 1.1 and 1.2 done, one attempt each)."""
    return Path(shutil.copytree(finished(tmp_path_factory), tmp_path / "sweep"))


def refused(r: object, words: str) -> None:
    """Exit 2, `words` in one paragraph on stderr, nothing on stdout, no traceback."""
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)  # type: ignore[attr-defined]
    err = r.stderr  # type: ignore[attr-defined]
    assert "Traceback" not in err and "Traceback" not in r.stdout  # type: ignore[attr-defined]
    assert words in err, err
    assert "\n\n" not in err.strip(), err


def test_a_wandb_int_uniform_of_2_63_values_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "train.py", "print(1)\n")
    parameters = "parameters:\n  n:\n    distribution: int_uniform\n    min: {}\n    max: {}\n"
    head = "program: train.py\nmethod: grid\nmetric: {name: loss, goal: minimize}\n"
    write(tmp_path / "wb.yaml", head + parameters.format(-1, 2**63 - 2))
    refused(
        cli("plan", "wb.yaml", cwd=tmp_path),
        "error: wb.yaml: parameters.n: int_uniform from min -1 to max 9223372036854775806 holds 9223372036854775808 "
        "values, more than a grid can count (at most 9223372036854775807, 2**63 - 1, values a parameter). Narrow "
        "min and max (a grid runs each value: list the values to try with values: [...]).",
    )
    # one value fewer is a range a grid can count: refused for its cells, as any grid too large
    write(tmp_path / "wb.yaml", head + parameters.format(0, 2**63 - 2))
    refused(
        cli("plan", "wb.yaml", cwd=tmp_path),
        "the grid has 9,223,372,036,854,775,807 cells, more than sweepq's limit of",
    )


def test_a_selector_longer_than_a_file_name_is_no_cell(sweep: Path) -> None:
    root = sweep / "runs" / "tiny"
    long = "x" * 300  # a file name holds at most 255 bytes: asking whether it is a folder fails (ENAMETOOLONG)
    words = f"error: no cell matches '{'x' * 80}'... (a selector of 300 characters): the sweep's groups are 1 tiny"
    refused(cli("show", long, "--root", str(root)), words)
    refused(cli("logs", long, "--root", str(root)), words)
    refused(cli("export", "csv", str(sweep / "out"), "--root", str(root), "--cell", long), words)
    assert not (sweep / "out").exists()
    digits = "1." + "9" * 5000  # a cell id no 64-bit integer holds (and int() refuses past 4,300 digits)
    refused(cli("show", digits, "--root", str(root)), "(a selector of 5002 characters)")


def test_logs_of_an_attempt_beyond_sqlites_integers_is_refused(sweep: Path) -> None:
    root = sweep / "runs" / "tiny"
    refused(
        cli("logs", "1.1", "--root", str(root), "--attempt", "99999999999999999999"),
        "error: cell 1.1 has no attempt 99999999999999999999 (attempt numbers end at 9223372036854775807, "
        "SQLite's largest integer) (its attempts: 1); leave out --attempt for the latest",
    )
    refused(
        cli("logs", "1.1", "--root", str(root), "--attempt", str(2**63 - 1)),
        "error: cell 1.1 has no attempt 9223372036854775807 (its attempts: 1); leave out --attempt for the latest",
    )


def test_report_html_into_a_folder_where_nothing_can_be_created(sweep: Path) -> None:
    if os.geteuid() == 0:
        folder = Path("/sys")  # root may write anywhere a mode allows: sysfs creates no file for anyone
    else:
        folder = sweep / "locked"
        folder.mkdir(mode=0o500)
    page = folder / "report.html"
    r = cli("report", "--root", str(sweep / "runs" / "tiny"), "--html", str(page))
    refused(r, f"error: cannot create report.html in {folder}: ")
    assert r.stderr.rstrip().endswith("Name a FILE in a folder this user may write (nothing was written)")
    assert not page.exists() and not [p for p in folder.iterdir() if p.name.startswith(".report.html")]


def test_history_numbers_out_of_range_are_skipped_and_said(sweep: Path) -> None:
    root = sweep / "runs" / "tiny"
    path = CellPaths(root, "1.1").metrics(1)
    kept = sum(1 for line in path.read_text().splitlines()[1:] if line)
    with open(path, "a") as f:
        f.write('{"step":100000000000000000000000000,"time":1764000000.5,"values":{"loss":1.5}}\n')
        f.write('{"step":11,"time":1e999,"values":{"loss":1.5}}\n')
        f.write('{"step":12,"time":1764000001.5,"values":{"loss":1e999}}\n')
    warning = (
        f"warning: {path}: 3 line(s) held numbers out of range, skipped (a step beyond 64-bit integers, a time "
        "that is not a finite number, a value beyond a double)\n"
    )
    r = cli("export", "csv", str(sweep / "csv"), "--root", str(root), "--cell", "1.1")
    assert (r.returncode, r.stderr) == (0, warning)
    with open(sweep / "csv" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == kept and all(row["value"] not in ("inf", "nan") and row["time"] != "inf" for row in rows)
    assert "inf" not in (sweep / "csv" / "metrics.csv").read_text()
    r = cli("export", "tensorboard", str(sweep / "tb"), "--root", str(root), "--cell", "1.1")
    assert (r.returncode, r.stderr) == (0, warning)
    assert r.stdout.startswith(f"wrote {kept} points of 1 cell")
    pytest.importorskip("mlflow", reason="export mlflow needs the mlflow extra")
    uri = f"sqlite:///{sweep / 'mlflow.db'}"
    r = cli("export", "mlflow", "--root", str(root), "--cell", "1.1", "--tracking-uri", uri)
    assert r.returncode == 0 and warning in r.stderr and "Traceback" not in r.stderr, r.stderr
    assert r.stdout.startswith(f"exported {kept} points of 1 cell")


def attempts_column(root: Path) -> list[tuple[str, object, str]]:
    with sqlite3.connect(f"file:{root / 'sweepq.db'}?mode=ro", uri=True) as c:
        return c.execute("SELECT id, attempts, typeof(attempts) FROM cells ORDER BY id").fetchall()


def test_repair_refuses_an_attempt_folder_numbered_beyond_sqlites_integers(sweep: Path) -> None:
    root = sweep / "runs" / "tiny"
    attempts = CellPaths(root, "1.1").attempt_dir(1).parent
    before = sorted(p.name for p in root.iterdir())
    db = (root / "sweepq.db").read_bytes()
    for name in ("99999999999999999999999", str(2**63 - 1)):
        (attempts / name).mkdir()
        refused(
            cli("repair", "tiny.yaml", "--force", cwd=sweep),
            f"error: {attempts / name} is numbered beyond any attempt sweepq makes: attempt numbers run from 1 to "
            "9223372036854775806 (SQLite's integers, with room for the next attempt), and no attempt could follow "
            "this one. sweepq did not write this folder: move it out of the root, then run the repair again "
            "(nothing was changed).",
        )
        (attempts / name).rmdir()
        assert sorted(p.name for p in root.iterdir()) == before and (root / "sweepq.db").read_bytes() == db
    (attempts / str(2**63 - 2)).mkdir()  # the highest a repair takes: the next attempt, 2**63 - 1, still fits
    r = cli("repair", "tiny.yaml", "--force", cwd=sweep)
    assert r.returncode == 0, r.stderr
    assert attempts_column(root) == [("1.1", 2**63 - 2, "integer"), ("1.2", 1, "integer")]
