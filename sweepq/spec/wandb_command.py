"""A W&B file's command line as W&B's agent builds it, where that differs from Python's own spelling.

The agent (wandb_agent.py, `Agent._command_run`, and sdk/launch/sweeps/utils.py,
`create_sweep_command_args`) writes each value with `str()` (`--lr=0.1`,
`--flag=True`, `--opt={'lr': 0.1}`, `++lr=0.1` for `${args_override_hydra}`),
but the values it writes are not quite the file's: they reach it from W&B's
server as JSON that Go re-encoded, holding every number as a float64 and every
mapping as a map. So, at every depth:

* a whole-number float arrives as an int: `values: [1.0, 2.0]` runs `--n=1`
  and `--n=2` (W&B's grid code says so in sweeps/grid_search.py, `yaml_hash`:
  such a value "becomes an int when it becomes part of the run config in
  AgentHeartbeat"); from 1e21 on Go writes an exponent and it stays a float;
* mapping keys arrive sorted: `value: {b: 1, a: 2}` runs `--x={'a': 2, 'b': 1}`.

A cell's cfg keeps the file's values, as W&B's grid makes them; only what the
args macros hand the program is spelled as the agent gets it. Not reproduced:
Go's rounding of integers beyond 2**53, which would change the value itself.

The agent expands `${envvar:NAME}` only where NAME is capitals, digits and `_`;
any other name it leaves in place (a whole token it drops), which sweepq refuses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

#: From this magnitude on, Go's encoding/json writes a float64 with an exponent, so it stays a float.
_EXPONENT_FROM = 1e21

_ENVVAR = re.compile(r"\$\{envvar:([^}]*)\}")
_AGENT_NAME = re.compile(r"[A-Z0-9_]*\Z")  # the agent's SWEEP_COMMAND_ENV_VAR_REGEX


def as_agent_gets(value: Any) -> Any:
    """`value` as W&B's agent receives it: whole-number floats as ints, mapping keys sorted."""
    if isinstance(value, float) and value.is_integer() and abs(value) < _EXPONENT_FROM:
        return int(value)
    if isinstance(value, Mapping):
        return {key: as_agent_gets(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [as_agent_gets(item) for item in value]
    return value


def envvar_problem(tokens: Sequence[str]) -> tuple[int, str, str] | None:
    """The first `${envvar:name}` W&B's agent would not expand: (1-based token, problem, fix), or None."""
    for position, token in enumerate(tokens, start=1):
        for match in _ENVVAR.finditer(token):
            name = match.group(1)
            if _AGENT_NAME.match(name):
                continue
            done = "drop the token" if match.group(0) == token else f"pass {match.group(0)} to the program as written"
            return (
                position,
                f"W&B's agent expands ${{envvar:NAME}} only where NAME is capital letters, digits and _, so it "
                f"would {done}",
                f"Name the variable in capitals: export {name.upper()}=... and write ${{envvar:{name.upper()}}}",
            )
    return None
