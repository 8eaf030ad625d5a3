"""attempts on PostgreSQL: spans kept as on SQLite (span_micros a BIGINT, 0005's triggers in PL/pgSQL)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-28

0005 keeps each ended attempt's span on its row, and triggers forget it when what it came from
changes; it did so on SQLite only, and on a server `status` worked the spans of every settled
attempt out at each call (0.38 s of `status` on 100,000 cells). On PostgreSQL an INTEGER is 32
bits, too few for an attempt's microseconds past 36 minutes: `span_micros` becomes a BIGINT
there. The triggers are the same four, each a PL/pgSQL function of the sweep's schema that runs
with that schema as its search_path (`SET search_path FROM CURRENT`: the migration's, env.py).
SQLite is unchanged (its INTEGER holds 64 bits).
"""
from typing import Sequence, Union

from alembic import op
import sqlalchemy as sa


revision: str = '0009'
down_revision: Union[str, None] = '0008'
branch_labels: Union[str, Sequence[str], None] = None
depends_on: Union[str, Sequence[str], None] = None

_FORGET = "UPDATE attempts SET span_steps = NULL WHERE span_steps IS NOT NULL AND cell_id = {t}.cell_id AND number = {t}.attempt;"

# name -> (the function's body, the trigger's event)
TRIGGERS = {
    "tr_span_checkpoint_insert": (_FORGET.format(t="NEW"), "AFTER INSERT ON checkpoints"),
    "tr_span_checkpoint_update": (
        _FORGET.format(t="OLD") + " " + _FORGET.format(t="NEW"), "AFTER UPDATE ON checkpoints"
    ),
    "tr_span_checkpoint_delete": (_FORGET.format(t="OLD"), "AFTER DELETE ON checkpoints"),
    "tr_span_attempt_update": (
        "UPDATE attempts SET span_steps = NULL WHERE id = NEW.id AND span_steps IS NOT NULL;",
        "AFTER UPDATE OF cell_id, number, started_at, ended_at, start_step, end_step, reason, wall_seconds "
        "ON attempts",
    ),
}


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.alter_column("attempts", "span_micros", type_=sa.BigInteger(), existing_type=sa.Integer())
    for name, (body, event) in TRIGGERS.items():
        op.execute(
            f"CREATE FUNCTION {name}() RETURNS trigger LANGUAGE plpgsql SET search_path FROM CURRENT "
            f"AS $$ BEGIN {body} RETURN NULL; END $$"
        )
        op.execute(f"CREATE TRIGGER {name} {event} FOR EACH ROW EXECUTE FUNCTION {name}()")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, (_, event) in TRIGGERS.items():
        table = event.rsplit(" ON ", 1)[1]
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        op.execute(f"DROP FUNCTION IF EXISTS {name}()")
    op.alter_column("attempts", "span_micros", type_=sa.Integer(), existing_type=sa.BigInteger())
