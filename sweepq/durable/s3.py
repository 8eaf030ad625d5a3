"""A cell's durable files in an S3-compatible bucket (files.py's ObjectFiles on boto3).

Keys mirror the root's layout under the sweep's prefix: `<prefix>/cells/<cell>/DONE.json`,
`<prefix>/cells/<cell>/attempts/<n>/receipt.json`, a stream's segments at
`<prefix>/cells/<cell>/attempts/<n>/metrics.jsonl.segments/<offset>`. The client is the
checkpoints' (checkpoint/s3.py `client`: endpoint and credentials the standard AWS way), shared per
process. Plain puts suffice here: a single PUT replaces an object atomically, and a segment's key
is its offset, so a segment sent again puts the same bytes under the same key.
"""

from __future__ import annotations

from typing import Any

from sweepq.checkpoint.s3 import S3Url, _missing, client
from sweepq.durable.files import ObjectFiles


class S3Files(ObjectFiles):
    def __init__(self, where: S3Url, cell: str, s3: Any | None = None) -> None:
        super().__init__(cell)
        self.where = where
        self.s3 = s3 if s3 is not None else client()
        self.bucket = where.bucket
        self.prefix = where.key("cells", cell) + "/"

    @classmethod
    def at(cls, url: str, cell: str, s3: Any | None = None) -> S3Files:
        return cls(S3Url.parse(url), cell, s3)

    def _put(self, key: str, data: bytes) -> None:
        self.s3.put_object(Bucket=self.bucket, Key=self.prefix + key, Body=data)

    def _get(self, key: str) -> bytes | None:
        try:
            body: bytes = self.s3.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read()
        except Exception as e:
            if _missing(e):
                return None
            raise  # an outage is no missing file
        return body

    def _list(self, prefix: str) -> list[tuple[str, int]]:
        out = []
        pages = self.s3.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=self.prefix + prefix)
        for page in pages:
            for obj in page.get("Contents", ()):
                out.append((obj["Key"][len(self.prefix) :], int(obj["Size"])))
        return out

    def describe(self, name: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{name}"
