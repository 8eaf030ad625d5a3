"""sweep.plan_digest: which sweep file the cells were last reconciled with

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-15

A nullable text column: older roots read as never reconciled with a digest, so
their next launch compares every cell once and records it.
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0004'
down_revision: Union[str, None] = '0003'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('sweep', schema=None) as batch_op:
        batch_op.add_column(sa.Column('plan_digest', sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('sweep', schema=None) as batch_op:
        batch_op.drop_column('plan_digest')
