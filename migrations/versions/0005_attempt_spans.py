"""attempts: each ended attempt's span kept on its row, forgotten by triggers when what it came from changes

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-20

`status` on a large sweep worked out the span of every settled attempt from its
times at every call (sweepq/queue/queries.py). The span is now kept on the row
when the attempt ends; NULL means not kept, and the reads work it out as before,
so the attempts of an older root stay right until a launch keeps theirs. The index
that reads them (ix_attempts_span) also holds each attempt's start and end; it
replaces ix_attempts_started, so that a claim writes no more indexes than before.

The triggers forget a kept span on any write to what it came from: the attempt's
own times and steps, or a checkpoint row of the attempt. A later migration that
copies `attempts` or `checkpoints` into a new table (alembic's batch mode on
SQLite) drops them with the old table and must create them again
(tests/process/test_migrations.py checks that a migrated root has them).
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0005'
down_revision: Union[str, None] = '0004'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

_FORGET = "UPDATE attempts SET span_steps = NULL WHERE span_steps IS NOT NULL AND cell_id = {t}.cell_id AND number = {t}.attempt"

TRIGGERS = {
    "tr_span_checkpoint_insert": f"AFTER INSERT ON checkpoints BEGIN {_FORGET.format(t='NEW')}; END",
    "tr_span_checkpoint_update": (
        f"AFTER UPDATE ON checkpoints BEGIN {_FORGET.format(t='OLD')}; {_FORGET.format(t='NEW')}; END"
    ),
    "tr_span_checkpoint_delete": f"AFTER DELETE ON checkpoints BEGIN {_FORGET.format(t='OLD')}; END",
    "tr_span_attempt_update": (
        "AFTER UPDATE OF cell_id, number, started_at, ended_at, start_step, end_step, reason, wall_seconds "
        "ON attempts BEGIN UPDATE attempts SET span_steps = NULL WHERE id = NEW.id AND span_steps IS NOT NULL; END"
    ),
}


def upgrade() -> None:
    op.add_column('attempts', sa.Column('span_steps', sa.Integer(), nullable=True))
    op.add_column('attempts', sa.Column('span_micros', sa.Integer(), nullable=True))
    op.add_column('attempts', sa.Column('span_startup', sa.Double(), nullable=True))
    # Each claim inserts into every index of attempts: ix_attempts_started served only the listing of
    # every attempt in start order (`sweepq attempts`), which sorts instead.
    op.drop_index('ix_attempts_started', table_name='attempts')
    op.create_index(
        'ix_attempts_span',
        'attempts',
        ['cell_id', 'span_steps', 'span_micros', 'span_startup', 'started_at', 'ended_at'],
        unique=False,
    )
    if op.get_bind().dialect.name == "sqlite":  # the spans are kept only there (sweepq/queue/queries.py)
        for name, body in TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {body}")


def downgrade() -> None:
    if op.get_bind().dialect.name == "sqlite":  # created only there (upgrade)
        for name in TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
    op.drop_index('ix_attempts_span', table_name='attempts')
    op.create_index('ix_attempts_started', 'attempts', ['started_at'], unique=False)
    with op.batch_alter_table('attempts', schema=None) as batch_op:
        batch_op.drop_column('span_startup')
        batch_op.drop_column('span_micros')
        batch_op.drop_column('span_steps')
