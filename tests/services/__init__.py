"""Real servers the tests start for themselves (PostgreSQL), and their pytest fixtures."""
