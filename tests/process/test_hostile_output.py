"""What users and their training code write never reaches the terminal as markup or as an escape.

A real sweep named `[/x]`, whose training logs metric names holding `[`, `[bold]`, an OSC 0 escape
(set the window title) and formula starts, whose cfg values hold ESC, and whose failing cell raises
an exception holding `[/data/shard-17.bin]` and an OSC 52 escape (write the clipboard): it runs
every cell through `launch --no-live` and a launch writing to a file, and every human command shows
that text as it is, with each control character as its visible `\\x1b` form. `export csv` writes
every field spreadsheet-safe (OWASP's CSV injection) and keeps numbers numbers.
"""

from __future__ import annotations

import csv
import json
import os
import pty
import re
import subprocess
from pathlib import Path
from typing import IO

import pytest
from conftest import SWEEPQ, cli, write
from tiny_sweep import sweepq_many

pytestmark = pytest.mark.process

TRAINER = """
TITLE = "\\x1b]0;pwned\\x07"   # OSC 0: sets the terminal's window title
CLIP = "\\x1b]52;c;cHduZWQ=\\x07"  # OSC 52: writes the clipboard


def train(cfg, run):
    for step in range(1, 4):
        run.log(step, **{"acc[/val]": 0.5 + step / 10, "[bold]x": -0.5, "t" + TITLE: 1.0,
                         "=cmd": 1.0, "+p": 2.0, "@at": 3.0, "-x": 4.0})
        print(f"step {step} {TITLE} [red]log[/]", flush=True)
    if cfg["mode"] == "fail":
        raise ValueError(f"cannot open [/data/shard-17.bin] {CLIP}")
    return {"acc[/val]": 0.9}
"""

SPEC = r"""
name: "[/x]"
train: hostile:train
root: runs/h
metric: {name: "acc[/val]", goal: max}
params: {f_eq: "=HYPERLINK(1)", f_plus: "+1+2", f_at: "@SUM(A1)", f_dash: "-x", f_tab: "\tt", f_cr: "\rr", neg: -0.5}
grid: {mode: [ok, "\e]0;cfg\a", fail]}
"""

# Every C0 control character but newline and tab, DEL and every C1: none may reach a terminal.
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
TITLE = r"t\x1b]0;pwned\x07"  # the metric name, as shown
CLIP = r"\x1b]52;c;cHduZWQ=\x07"  # the exception's escape, as shown
CFG = r"\x1b]0;cfg\x07"  # the cfg value, as shown
ERROR = r"ValueError: cannot open [/data/shard-17.bin] " + CLIP


def clean(text: str) -> str:
    assert not RAW_CONTROL.search(text), [m.group() for m in RAW_CONTROL.finditer(text)]
    return text


def lines(text: str) -> list[str]:
    return clean(text).splitlines()


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("hostile")
    write(d / "hostile.py", TRAINER)
    write(d / "s.yaml", SPEC)
    return d


def test_a_hostile_sweep_runs_every_cell_and_every_command_shows_its_words_visibly(hostile: Path) -> None:
    d = hostile
    r = cli("launch", "s.yaml", "--workers", "2", "--no-live", cwd=d)
    assert r.returncode == 1, r.stdout + r.stderr  # one cell failed; none was stopped by its words
    out = lines(r.stdout)
    assert out[:2] == ["sweep [/x] at runs/h: 3 cells", "  queued: 1.1, 1.2, 1.3"]
    assert f"1.3 failed  (last: error: {ERROR})  logs: sweepq logs 1.3 runs/h" in out
    done = f"done  acc[/val]=0.9, [bold]x=-0.5, {TITLE}=1, =cmd=1, +p=2, @at=3, -x=4"
    assert {f"1.1 {done}", f"1.2 {done}"} <= set(out)
    assert out[-1] == "3 cells: 2 done, 1 failed" and out.count(out[-1]) == 1
    assert all(line == line.rstrip() for line in out)  # no trailing spaces
    assert clean(r.stderr) == ""

    ran = sweepq_many(
        {
            "status": ["status", "s.yaml"],
            "status_json": ["status", "s.yaml", "--json"],
            "show_ok": ["show", "1.2", "s.yaml"],
            "show_failed": ["show", "1.3", "s.yaml"],
            "attempts": ["attempts", "s.yaml"],
            "report": ["report", "s.yaml"],
            "logs": ["logs", "1.3", "s.yaml"],
            "best": ["best", "s.yaml"],
        },
        cwd=d,
    )
    assert {name: r.code for name, r in ran.items()} == dict.fromkeys(ran, 0)
    for name, got in ran.items():
        if name != "status_json":
            clean(got.stdout), clean(got.stderr)
            assert all(line == line.rstrip() for line in got.stdout.splitlines()), name

    cells = {c["cell"]: c for c in json.loads(ran["status_json"].stdout)}  # JSON: valid, the exact strings
    assert cells["1.2"]["cfg"]["mode"] == "\x1b]0;cfg\x07"
    assert cells["1.3"]["metrics"]["t\x1b]0;pwned\x07"] == 1.0 and cells["1.3"]["metrics"]["[bold]x"] == -0.5

    status = lines(ran["status"].stdout)
    row = next(line for line in status if line.startswith("1.2 "))
    assert CFG in row and status[-1] == "3 cells: 2 done, 1 failed"
    header = status[1]
    assert header.index("acc[/val]") + len("acc[/val]") == row.index("0.9") + len("0.9")  # aligned as shown
    # The note column is the first a narrow table drops (80 columns off a terminal; a slower machine's cells
    # ran long enough to show their usage, which takes its room): asked for at a width that keeps it.
    wide = cli("status", "s.yaml", cwd=d, env=dict(os.environ, COLUMNS="400"))
    assert f"{ERROR} (see sweepq logs 1.3 runs/h)" in wide.stdout

    shown = lines(ran["show_ok"].stdout)
    assert shown[:11] == [
        "cell      1.2 (group default)",
        "state     done",
        "cfg       f_eq    =HYPERLINK(1)",
        "          f_plus  +1+2",
        "          f_at    @SUM(A1)",
        "          f_dash  -x",
        "          f_tab           t",  # rich expands a tab to spaces
        r"          f_cr    \x0dr",
        "          neg     -0.5",
        f"          mode    {CFG}",
        "progress  step 3 100%",
    ]
    # The metrics' line may wrap where the page is narrow (80 columns off a terminal): read as one text.
    metrics = " ".join(" ".join(shown[11:13]).split())
    assert metrics.startswith(f"metrics acc[/val]=0.9, [bold]x=-0.5, {TITLE}=1, =cmd=1, +p=2, @at=3, -x=4")
    assert "ValueError: cannot open [/data/shard-17.bin]" in ran["show_failed"].stdout
    # Like status's note, the attempts' error column gives way to usage columns on a narrow page.
    wide = cli("attempts", "s.yaml", cwd=d, env=dict(os.environ, COLUMNS="400"))
    assert next(line for line in lines(wide.stdout) if line.startswith("1.3 ")).endswith(ERROR)
    assert "What matters for acc[/val] (higher is better): 2 cells, a partial grid" in lines(ran["report"].stdout)
    assert CFG in ran["report"].stdout
    logs = lines(ran["logs"].stdout)
    assert logs[1:4] == [rf"step {i} \x1b]0;pwned\x07 [red]log[/]" for i in (1, 2, 3)]
    assert logs[-1] == ERROR
    best = lines(ran["best"].stdout)
    assert best[0].split() == ["rank", "cell", "state", "mode", "best", "acc[/val]", "step"]
    assert "warning: no checkpoint holds the best acc[/val] of 2 done cell(s) (1.1, 1.2)" in ran["best"].stderr

    # A damaged root rebuilt from its files, then a launch whose output is a file (not a terminal, no --no-live).
    r = cli("repair", "s.yaml", "--force", cwd=d)
    assert r.returncode == 0, r.stdout + r.stderr
    assert lines(r.stdout)[0] == "rebuilt the queue of sweep [/x] at runs/h from its files"
    with open(d / "relaunch.txt", "w") as f:
        code = cli_to_file(d, f)
    assert code == 1
    out = lines((d / "relaunch.txt").read_text())
    assert out[:3] == ["sweep [/x] at runs/h: 3 cells", "  skipping (done): 1.1, 1.2", "  queued: 1.3"]
    assert f"1.3 failed  (last: error: {ERROR})  logs: sweepq logs 1.3 runs/h" in out
    assert out[-1] == "3 cells: 2 done, 1 failed" and out.count(out[-1]) == 1


def cli_to_file(d: Path, f: IO[str]) -> int:
    return subprocess.run(
        [*SWEEPQ, "launch", "s.yaml"], cwd=d, stdout=f, stderr=subprocess.STDOUT, timeout=300
    ).returncode


def test_csv_export_fields_are_spreadsheet_safe_and_numbers_stay_numbers(hostile: Path) -> None:
    d = hostile
    if not (d / "runs/h").exists():
        assert cli("launch", "s.yaml", "--workers", "2", "--no-live", cwd=d).returncode == 1
    r = cli("export", "csv", "out", "s.yaml", cwd=d)
    assert r.returncode == 0, r.stderr
    with open(d / "out/cells.csv", newline="") as f:
        header, *rows = list(csv.reader(f))
    for name in ("'=cmd", "'+p", "'@at", "'-x"):
        assert f"metrics.{name}" not in header  # the header's field starts with `metrics.`: safe as it is
    row = dict(zip(header, next(r for r in rows if r[0] == "1.1"), strict=True))
    assert row["cfg.f_eq"] == "'=HYPERLINK(1)" and row["cfg.f_plus"] == "'+1+2" and row["cfg.f_at"] == "'@SUM(A1)"
    assert row["cfg.f_dash"] == "'-x" and row["cfg.f_tab"] == "'\tt" and row["cfg.f_cr"] == "'\rr"
    failed = dict(zip(header, next(r for r in rows if r[0] == "1.3"), strict=True))  # its metrics: all it logged
    assert row["cfg.neg"] == "-0.5" and failed["metrics.[bold]x"] == "-0.5"  # real numbers stay numbers
    assert failed["metrics.-x"] == "4.0" and failed["metrics.=cmd"] == "1.0"
    with open(d / "out/metrics.csv", newline="") as f:
        names = {r[3] for r in list(csv.reader(f))[1:]}
    assert {"'=cmd", "'+p", "'@at", "'-x", "acc[/val]", "[bold]x"} <= names
    with open(d / "out/attempts.csv", newline="") as f:
        assert all(not field.startswith(("=", "+", "@", "\t", "\r")) for row in csv.reader(f) for field in row)


def test_the_live_table_on_a_terminal_shows_the_words_and_says_the_counts_once(tmp_path: Path) -> None:
    write(tmp_path / "hostile.py", TRAINER)
    write(tmp_path / "s.yaml", SPEC)
    master, slave = pty.openpty()
    p = subprocess.Popen(
        [*SWEEPQ, "launch", "s.yaml", "--workers", "2"], cwd=tmp_path, stdin=slave, stdout=slave, stderr=slave
    )
    os.close(slave)
    seen = bytearray()
    while True:  # read until the launch closed its end of the terminal (it exited)
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: no process holds the terminal any more
            break
        if not data:
            break
        seen += data
    os.close(master)
    assert p.wait(timeout=300) == 1, seen.decode(errors="replace")
    assert b"\x1b]0;" not in seen and b"\x1b]52;" not in seen and b"\x07" not in seen  # no OSC ran
    assert b"sweep \x1b[1m[/x]\x1b[0m at runs/h: 3 cells\r\n" in seen  # the name as text, in bold
    # The last frame of the table ends with the counts; the launch does not print them a second time.
    shown = re.sub(rb"\x1b\[[0-9;?]*[A-Za-z]", b"", bytes(seen))  # rich's own style and cursor codes
    assert shown.endswith(b"\r\n3 cells: 2 done, 1 failed\r\n") and b"failed\r\n3 cells: 2 done, 1 failed" not in shown
