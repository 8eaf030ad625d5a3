"""cells.ran_cfg: the cfg a done cell's result came from, when the sweep file has changed it since

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-28

`launch --accept-changed` gives a done cell the file's new cfg but keeps its result
(it is not run again unless asked): the cfg that result came from is kept here, so
that `status`, `show` and `best` show every result beside the cfg that produced it.
NULL (every older root's cells) means the cell's cfg is the one its result came from.
A plain nullable column added in place: no table is copied, the span triggers of
0005 stay.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0006'
down_revision: Union[str, None] = '0005'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column('cells', sa.Column('ran_cfg', sa.JSON(), nullable=True))


def downgrade() -> None:
    # In place, not batch mode: copying `cells` would drop a table that attempts and checkpoints reference
    # (foreign keys are on). SQLite drops a plain column in place since 3.35.
    op.execute("ALTER TABLE cells DROP COLUMN ran_cfg")
