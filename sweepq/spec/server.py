"""The sweep file's keys for a sweep beyond one machine: `database:`, `storage:` and `lease:`.

`database:` is kept as written, `${envvar:NAME}` unexpanded (queue/database_url.py fills it in
only when connecting, so a password never reaches a file or a terminal); here it is only checked.
`storage:` is kept the same way (checkpoint/storage_url.py opens it), a relative folder made the sweep
file's folder's. `lease:` sets how a holder proves life on a server database (queue/leases.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sweepq.checkpoint import storage_url
from sweepq.queue.database_url import problem
from sweepq.spec.read import SpecContext, check_keys, read_number, require_mapping
from sweepq.spec.types import DEFAULT_EXPIRE_SECONDS, DEFAULT_RENEW_SECONDS, LeaseTerms

LEASE_KEYS = ("renew_seconds", "expire_seconds")


def read_database(ctx: SpecContext, data: dict) -> str | None:
    value = data.get("database")
    if value is None:
        return None
    if not isinstance(value, str):
        raise ctx.error(
            "database",
            "expected a database URL (a string)",
            "Write e.g. database: postgresql+psycopg://user:${envvar:PGPASSWORD}@host/db",
        )
    why = problem(value)
    if why is not None:
        raise ctx.error(
            "database",
            why,
            "Write a SQLAlchemy URL, e.g. postgresql+psycopg://user:${envvar:PGPASSWORD}@host/db "
            "(or leave database: out for the SQLite file in the root)",
        )
    return value


def read_storage(ctx: SpecContext, data: dict) -> str | None:
    value = data.get("storage")
    if value is None:
        return None
    hint = (
        "Write e.g. storage: s3://bucket/sweeps/${envvar:USER} (endpoint and credentials the AWS way), "
        "storage: /mnt/shared/sweeps (a folder every machine mounts), or leave storage: out for the root folder"
    )
    if not isinstance(value, str):
        raise ctx.error("storage", "expected a folder or an s3://bucket/prefix URL (a string)", hint)
    why = storage_url.problem(value)
    if why is not None:
        raise ctx.error("storage", why, hint)
    return storage_url.anchored(value, Path(ctx.spec_dir))


def read_lease(ctx: SpecContext, value: Any) -> LeaseTerms:
    if value is None:
        return LeaseTerms()
    lease = require_mapping(ctx, value, "lease", "lease: {renew_seconds: 5, expire_seconds: 30}")
    check_keys(ctx, lease, LEASE_KEYS, "lease")
    renew = read_number(ctx, lease.get("renew_seconds"), "lease.renew_seconds", above=0)
    expire = read_number(ctx, lease.get("expire_seconds"), "lease.expire_seconds", above=0)
    terms = LeaseTerms(
        renew_seconds=DEFAULT_RENEW_SECONDS if renew is None else float(renew),
        expire_seconds=DEFAULT_EXPIRE_SECONDS if expire is None else float(expire),
    )
    if terms.renew_seconds >= terms.expire_seconds:
        raise ctx.error(
            "lease",
            f"renew_seconds ({terms.renew_seconds:g}) is not below expire_seconds ({terms.expire_seconds:g}): "
            "the lease would expire between two renewals of a live holder",
            "Renew several times per term, e.g. renew_seconds: 5 with expire_seconds: 30",
        )
    return terms
