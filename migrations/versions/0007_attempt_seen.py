"""attempts.seen_at and attempts.closed_at: an attempt found dead ends at its last sign of life

Revision ID: 0007e
Revises: 0006
Create Date: 2026-11-28

`seen_at` is the attempt's last sign of life as the queue knows it: kept by the worker's flush
(once a second while it watches the attempt), and by whoever closes it. `closed_at` is when the
queue closed the attempt. A worker closes an attempt as it ends (`ended_at` = `closed_at`); a
reaper closes one whose processes died unseen, maybe a night later: its `ended_at` is then its last
sign of life, and `closed_at - ended_at` is downtime, not training. NULL in both (every older
root's attempts): `ended_at` is when the attempt was closed, as before.
Plain nullable columns added in place: no table is copied, the span triggers of 0005 stay.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0007e'
down_revision: Union[str, None] = '0006'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.add_column('attempts', sa.Column('seen_at', sa.DateTime(), nullable=True))
    op.add_column('attempts', sa.Column('closed_at', sa.DateTime(), nullable=True))


def downgrade() -> None:
    # In place, not batch mode (a batch copy of attempts would drop the span triggers of 0005).
    op.execute("ALTER TABLE attempts DROP COLUMN closed_at")
    op.execute("ALTER TABLE attempts DROP COLUMN seen_at")
