"""Opening a cell's durable files in the sweep's storage (checkpoint/storage_url.py reads the URL).

Apart from files.py because the bucket's files (s3.py) are built on files.py's ObjectFiles.
"""

from __future__ import annotations

from sweepq.checkpoint import storage_url
from sweepq.durable.files import CellFiles, FolderFiles
from sweepq.layout import CellPaths


def for_cell(cell: CellPaths, where: str | None) -> CellFiles:
    """The durable files of `cell` in the sweep's storage `where` (its settings' `storage`, as the launch
    chose it; None: the root folder). This process's SWEEPQ_STORAGE_URL comes first, as for checkpoints;
    the S3 client is the one the checkpoints use."""
    at = storage_url.locate(where)
    if at is None:
        return FolderFiles(cell.root, cell.cell_id)
    if at.s3_url is not None:
        from sweepq.durable.s3 import S3Files

        return S3Files.at(at.s3_url, cell.cell_id, at.client)
    assert at.folder is not None
    return FolderFiles(at.folder, cell.cell_id)
