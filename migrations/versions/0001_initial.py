"""initial schema

Revision ID: 0001
Revises: 
Create Date: 2026-11-22

Timestamps are naive UTC (sweepq.models.UTCDateTime normalises them).
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0001'
down_revision: Union[str, None] = None
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None


def upgrade() -> None:
    op.create_table('cells',
    sa.Column('id', sa.String(length=32), nullable=False),
    sa.Column('group_number', sa.Integer(), nullable=False),
    sa.Column('index', sa.Integer(), nullable=False),
    sa.Column('group_name', sa.String(length=200), nullable=False),
    sa.Column('cfg', sa.JSON(), nullable=False),
    sa.Column('cfg_hash', sa.String(length=64), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('attempts', sa.Integer(), nullable=False),
    sa.Column('last_reason', sa.String(length=16), nullable=True),
    sa.Column('retry_after', sa.DateTime(), nullable=True),
    sa.Column('budget_base', sa.Integer(), nullable=False),
    sa.Column('nan_step', sa.Integer(), nullable=True),
    sa.Column('cancel_requested', sa.Boolean(), nullable=False),
    sa.Column('removed', sa.Boolean(), nullable=False),
    sa.Column('step', sa.Integer(), nullable=True),
    sa.Column('total_steps', sa.Integer(), nullable=True),
    sa.Column('epoch', sa.Double(), nullable=True),
    sa.Column('total_epochs', sa.Double(), nullable=True),
    sa.Column('metrics', sa.JSON(), nullable=True),
    sa.Column('best', sa.Double(), nullable=True),
    sa.Column('best_step', sa.Integer(), nullable=True),
    sa.Column('progress_at', sa.DateTime(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.Column('finished_at', sa.DateTime(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('cells', schema=None) as batch_op:
        batch_op.create_index('ix_cells_order', ['group_number', 'index'], unique=False)
        batch_op.create_index('ix_cells_state', ['state'], unique=False)

    op.create_table('events',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('cell_id', sa.String(length=32), nullable=True),
    sa.Column('at', sa.DateTime(), nullable=False),
    sa.Column('kind', sa.String(length=32), nullable=False),
    sa.Column('detail', sa.JSON(), nullable=True),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.create_index('ix_events_cell', ['cell_id'], unique=False)

    op.create_table('sweep',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('name', sa.String(length=200), nullable=False),
    sa.Column('spec_path', sa.Text(), nullable=True),
    sa.Column('settings', sa.JSON(), nullable=False),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('updated_at', sa.DateTime(), nullable=False),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_table('attempts',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('cell_id', sa.String(length=32), nullable=False),
    sa.Column('number', sa.Integer(), nullable=False),
    sa.Column('worker', sa.String(length=200), nullable=False),
    sa.Column('host', sa.String(length=200), nullable=False),
    sa.Column('pid', sa.Integer(), nullable=True),
    sa.Column('worker_pid', sa.Integer(), nullable=True),
    sa.Column('gpus', sa.JSON(), nullable=True),
    sa.Column('started_at', sa.DateTime(), nullable=False),
    sa.Column('ended_at', sa.DateTime(), nullable=True),
    sa.Column('start_step', sa.Integer(), nullable=False),
    sa.Column('start_checkpoint_sha', sa.String(length=64), nullable=True),
    sa.Column('nan_step', sa.Integer(), nullable=True),
    sa.Column('end_step', sa.Integer(), nullable=True),
    sa.Column('reason', sa.String(length=16), nullable=True),
    sa.Column('exit_code', sa.Integer(), nullable=True),
    sa.Column('exit_signal', sa.Integer(), nullable=True),
    sa.Column('error_tail', sa.Text(), nullable=True),
    sa.Column('wall_seconds', sa.Double(), nullable=True),
    sa.Column('gpu_seconds', sa.Double(), nullable=True),
    sa.Column('peak_memory_bytes', sa.Integer(), nullable=True),
    sa.Column('peak_gpu_memory_bytes', sa.Integer(), nullable=True),
    sa.Column('environment', sa.JSON(), nullable=True),
    sa.Column('code_fingerprint', sa.JSON(), nullable=True),
    sa.Column('data_fingerprint', sa.JSON(), nullable=True),
    sa.Column('note', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['cell_id'], ['cells.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('cell_id', 'number', name='uq_attempts_cell_number')
    )
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.create_index('ix_attempts_started', ['started_at'], unique=False)

    op.create_table('checkpoints',
    sa.Column('id', sa.Integer(), autoincrement=True, nullable=False),
    sa.Column('cell_id', sa.String(length=32), nullable=False),
    sa.Column('step', sa.Integer(), nullable=False),
    sa.Column('epoch', sa.Double(), nullable=True),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('metrics', sa.JSON(), nullable=True),
    sa.Column('path', sa.Text(), nullable=False),
    sa.Column('manifest_sha256', sa.String(length=64), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=True),
    sa.Column('size_bytes', sa.Integer(), nullable=True),
    sa.Column('created_at', sa.DateTime(), nullable=False),
    sa.Column('note', sa.Text(), nullable=True),
    sa.ForeignKeyConstraint(['cell_id'], ['cells.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    with op.batch_alter_table('checkpoints', schema=None) as batch_op:
        batch_op.create_index('ix_checkpoints_cell_step', ['cell_id', 'step'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('checkpoints', schema=None) as batch_op:
        batch_op.drop_index('ix_checkpoints_cell_step')

    op.drop_table('checkpoints')
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.drop_index('ix_attempts_started')

    op.drop_table('attempts')
    op.drop_table('sweep')
    with op.batch_alter_table('events', schema=None) as batch_op:
        batch_op.drop_index('ix_events_cell')

    op.drop_table('events')
    with op.batch_alter_table('cells', schema=None) as batch_op:
        batch_op.drop_index('ix_cells_state')
        batch_op.drop_index('ix_cells_order')

    op.drop_table('cells')
