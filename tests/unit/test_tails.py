"""An error tail as a terminal showed it: a progress bar's carriage-return redraws never become the note."""

from __future__ import annotations

from pathlib import Path

from tqdm import tqdm

from sweepq.host.tails import tail_file


def test_a_progress_bar_cut_off_mid_redraw_is_not_the_tail_s_last_line(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    with open(log, "w") as f:
        f.write("Traceback (most recent call last):\nValueError: batch 7 has no labels\n")
        bar = tqdm(total=16, file=f, mininterval=0, ascii=False)  # the real bar's \r redraws, not a copy
        for _ in range(6):
            bar.update(1)
        f.flush()  # the program died here: the bar never closed with a newline
    assert b"\r" in log.read_bytes()
    text = tail_file(log)
    assert text is not None and text.splitlines()[-1] == "ValueError: batch 7 has no labels"
    assert "\r" not in text and "%|" not in text


def test_a_line_overwritten_by_carriage_returns_keeps_what_was_last_shown(tmp_path: Path) -> None:
    log = tmp_path / "stderr.log"
    log.write_text("loading 1\rloading 2\rloaded 3 shards\nRuntimeError: out of shards\n")
    assert tail_file(log) == "loaded 3 shards\nRuntimeError: out of shards"
