"""The throwaway PostgreSQL of the tests: on the loopback only, and gone (process and folder) when stopped."""

from __future__ import annotations

import os
import socket

import psutil
import psycopg
import pytest

from services.postgres import LOOPBACK, PostgresServer


def test_the_server_listens_on_the_loopback_only(postgres_server: PostgresServer) -> None:
    with psycopg.connect(postgres_server.dsn()) as conn:
        settings = {k: conn.execute(f"SHOW {k}").fetchone()[0] for k in ("listen_addresses", "unix_socket_directories")}  # type: ignore[index]
    assert settings == {"listen_addresses": LOOPBACK, "unix_socket_directories": ""}
    others = [
        a.address
        for addrs in psutil.net_if_addrs().values()
        for a in addrs
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    ]
    for address in others:  # this machine's other addresses refuse the port
        with pytest.raises(OSError), socket.create_connection((address, postgres_server.port), timeout=5):
            pass


def test_stop_ends_the_server_by_its_process_id_and_deletes_its_folder(postgres_server: PostgresServer) -> None:
    server = PostgresServer().start()
    try:
        pid, folder, port = server.pid, server.folder, server.port
        assert pid is not None and folder is not None and folder.is_dir()
        assert server.start_seconds is not None and server.start_seconds > 0
        # Not a child of the test process: the suite kills every such child after each test.
        assert pid not in {p.pid for p in psutil.Process().children(recursive=True)}
        assert psutil.Process(pid).username() == ("postgres" if os.geteuid() == 0 else psutil.Process().username())
    finally:
        server.stop()
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not folder.exists()
    with pytest.raises(OSError):
        socket.create_connection((LOOPBACK, port), timeout=5).close()
    server.stop()  # twice is harmless
