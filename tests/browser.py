"""Headless Chromium for the tests: load a page, read its DOM, and list the requests it made (Debian's `chromium`).

`make test` installs the package where it is missing; without it these tests skip.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium package (make test installs it)")


def chromium(profile: Path, url: str, *args: str) -> str:
    """Chromium, headless, on `url`; its stdout. The host resolver answers only 127.0.0.1: the browser's own
    background requests (below) fail at once instead of reaching out."""
    assert CHROMIUM is not None
    done = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-background-networking",
            "--no-first-run",
            f"--user-data-dir={profile}",
            "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
            *args,
            url,
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def requests_from_the_page(net_log: Path, page_url: str) -> list[str]:
    """Every URL request of the page other than itself and data: URIs, from Chromium's net log.

    Chromium also talks to Google's services on its own (time, spelling dictionaries,
    accounts) whatever the flags: such a request has no initiating origin ("not an
    origin") and is not isolated under the page's site. A request the page makes (an
    image, a style, a frame, a fetch, a navigation) carries the page's origin: "null" or
    "file://" for a file.
    """
    log = json.loads(net_log.read_text())
    kinds = {number: name for name, number in log["constants"]["logEventTypes"].items()}
    urls = []
    for event in log["events"]:
        params = event.get("params") or {}
        if kinds[event["type"]] != "URL_REQUEST_START_JOB" or "url" not in params:
            continue
        browsers_own = params.get("initiator") == "not an origin" and "file://" not in str(
            params.get("network_isolation_key", "")
        )
        if browsers_own or params["url"] == page_url or params["url"].startswith("data:"):
            continue
        urls.append(params["url"])
    return urls


class Dom(HTMLParser):
    """What the tests read of a page: its title, the cells table's rows, each chart's paths, failures' rows, tags."""

    def __init__(self) -> None:
        super().__init__()
        self.title = ""
        self.rows: list[list[str]] = []
        self.charts: list[list[dict[str, str]]] = []  # per <svg> of the curves: its <path>s' attributes
        self.grid_lines: list[str] = []  # the parallel coordinates' lines: each <polyline>'s cell (its title)
        self.failures: list[list[str]] = []
        self.tags: list[str] = []
        self._tables: list[str] = []  # the open tables' ids
        self._section = ""
        self._row: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        self.tags.append(tag)
        if tag == "table":
            self._tables.append(a.get("id", ""))
        elif tag == "section":
            self._section = a.get("id", "")
        elif tag == "tr" and self._tables:
            self._end_row()  # the page leaves out </td> and </tr>, as HTML allows; Chromium's DOM has them
            self._row = []
        elif tag == "td" and self._row is not None:
            self._row.append("")
        elif tag == "svg" and self._section == "curves":
            self.charts.append([])
        elif tag == "path" and self.charts and self._section == "curves":
            self.charts[-1].append(a)
        elif tag == "polyline" and self._section == "grid":
            self.grid_lines.append("")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("tr", "tbody", "table"):
            self._end_row()
        if tag == "table":
            self._tables.pop()

    def _end_row(self) -> None:
        if self._row:
            row = [text.strip() for text in self._row]
            if self._tables[-1] == "cells-table":
                self.rows.append(row)
            elif self._section == "failures":
                self.failures.append(row)
        self._row = None

    def handle_data(self, data: str) -> None:
        if self._row:
            self._row[-1] += data
        elif self.grid_lines and self.tags[-1] == "title" and not self.grid_lines[-1]:
            self.grid_lines[-1] = data.split(":")[0]
        elif self.tags and self.tags[-1] == "title" and not self.title:
            self.title = data


def dom(text: str) -> Dom:
    d = Dom()
    d.feed(text)
    return d


def kind(path: dict[str, str]) -> str:
    """A path's first class: c (a cell's curve), t (a lost tail), k (checkpoints), band, median; "" for axes."""
    return (path.get("class", "").split() or [""])[0]


def curves_of(paths: list[dict[str, str]]) -> list[str]:
    return sorted(p["data-cell"] for p in paths if kind(p) == "c")


def rgb(colour: str) -> tuple[int, int, int]:
    return int(colour[1:3], 16), int(colour[3:5], 16), int(colour[5:7], 16)
