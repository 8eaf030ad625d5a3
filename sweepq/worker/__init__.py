"""The worker process (`sweepq worker`): claim a cell, start its attempt, watch it, record its end.

Also what the worker starts beside its attempts: the template process that forks them.
"""
