"""leases: a running cell's lease on a server database, renewed by its holder, expired in the database's clock

Revision ID: 0008
Revises: 0007e
Create Date: 2026-11-28

One row per running cell held by a lease (sweepq/queue/leases.py): its holder's token, when it
expires and was last renewed (timestamptz, compared with the server's now()), and the holder's host.
A SQLite root proves life with file locks and leaves the table empty.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0008'
down_revision: Union[str, None] = '0007e'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table(
        'leases',
        sa.Column('cell_id', sa.String(length=32), nullable=False),
        sa.Column('token', sa.String(length=64), nullable=False),
        sa.Column('expires_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('renewed_at', sa.DateTime(timezone=True), nullable=False),
        sa.Column('host', sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint('cell_id'),
    )


def downgrade() -> None:
    op.drop_table('leases')
