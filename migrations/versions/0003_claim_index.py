"""cells: the claim index (state, removed, group_number, index)

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-08

A claim picks the first claimable cell in cell order: with this index that is a
seek and a walk of the few rows in front, not a scan and a sort of every
claimable cell. It replaces ix_cells_state, its prefix.
"""
from typing import Sequence, Union

from alembic import op


revision: str = '0003'
down_revision: Union[str, None] = '0002'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    with op.batch_alter_table('cells', schema=None) as batch_op:
        batch_op.create_index('ix_cells_claim', ['state', 'removed', 'group_number', 'index'], unique=False)
        batch_op.drop_index('ix_cells_state')


def downgrade() -> None:
    with op.batch_alter_table('cells', schema=None) as batch_op:
        batch_op.create_index('ix_cells_state', ['state'], unique=False)
        batch_op.drop_index('ix_cells_claim')
