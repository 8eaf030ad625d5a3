"""Alembic migrations of sweepq's database (shipped in the wheel as sweepq.migrations).

They run in code when a root is opened (see sweepq/queue/database.py); nobody calls alembic
by hand. Add a revision with:
    .venv/bin/alembic -c migrations/alembic.ini revision -m "what changed"
"""
