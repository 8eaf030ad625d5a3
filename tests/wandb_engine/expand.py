"""W&B's own engine on sweep files: the runs its grid makes and the command lines its agent builds.

Run by the W&B table test (tests/spec/test_wandb_engine.py) with the interpreter of
.venv-wandb (`make wandb-engine`), which holds PyPI's `sweeps` (the grid code W&B's
server runs) and `wandb` (the CLI and the agent). sweepq never imports it.

    expand.py FILE...   prints one JSON object, {FILE: result}, where result is
      {"method": M}          a method other than grid (W&B would sample it; sweepq refuses it),
      {"refused": TEXT}      W&B itself refuses the file (its CLI or its grid code),
      {"runs": [...], "commands": {INDEX: {"argv": [...], "macros": {...}}}}
        runs: every run's values in W&B's order (its grid, cut to run_cap as its controller does);
        commands: for runs spread evenly over the grid (all of them up to MACROS), what each of
          the agent's args macros expands to; for fewer of them (WHOLE), also the agent's whole
          command line (argv, or "failed" where the agent fails) and the args JSON file it wrote
          if the command names one.

Each stage is W&B's own code: `yaml.safe_load` as `wandb sweep` reads the file, the
CLI's `_validate_config_and_fill_distribution` and JSON round trip (`_upsert_sweep`),
`sweeps.grid_search.grid_search_next_runs` (validate=False: validation drops nested
parameters), and the agent's `Agent._command_run` and `create_sweep_command_args`.
The one stage that is not W&B's code is its server, which cannot run here; `server` below
reproduces the one thing it does to a run's values on their way to the agent.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any, ClassVar

import yaml

ARGS_JSON_FILE = "<args_json_file>"  # stands for the path of the agent's args JSON file
MACROS = 300  # runs per file whose args macros are expanded
WHOLE = 20  # runs per file whose whole command line the agent builds (it writes a file for each: milliseconds)
ALL_RUNS = 10_001  # more than sweepq's largest grid: the grid then ends by itself


def server(value: Any) -> Any:
    """A run's value as W&B's server hands it to the agent: JSON re-encoded by Go.

    Go holds every number as a float64 and writes a whole one below 1e21 without a
    fraction, so Python reads it back as an int (W&B says so in sweeps/grid_search.py,
    yaml_hash); it writes a map with its keys sorted, the run's own top-level keys too (the
    grid lists nested parameters after the others).
    """
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return int(value)
    if isinstance(value, dict):
        return {key: server(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [server(item) for item in value]
    return value


class Recorder:
    """Stands in for the agent's AgentProcess: keeps the command instead of starting it."""

    last: ClassVar[list[Any]] = []

    def __init__(self, command: list[Any] | None = None, **_: Any) -> None:
        Recorder.last = list(command or [])


def main(paths: list[str]) -> dict[str, Any]:
    # Nothing here talks to W&B: no run is started, no error report sent.
    os.environ.update(WANDB_SILENT="true", WANDB_MODE="offline", WANDB_ERROR_REPORTING="false")
    from wandb import wandb_agent

    wandb_agent.AgentProcess = Recorder
    with tempfile.TemporaryDirectory(prefix="wandb-engine-") as folder:
        os.environ["WANDB_DIR"] = folder  # where the agent writes each run's config files
        agent = wandb_agent.Agent(api=None, queue=None)
        return {path: expand(agent, path) for path in paths}


def expand(agent: Any, path: str) -> dict[str, Any]:
    from jsonschema import ValidationError
    from sweeps.grid_search import grid_search_next_runs
    from wandb.apis.public.sweeps import _validate_config_and_fill_distribution

    with open(path, encoding="utf-8") as file:
        config = yaml.safe_load(file)
    if config.get("method") != "grid":
        return {"method": config.get("method")}
    try:
        config = json.loads(json.dumps(_validate_config_and_fill_distribution(config)))
        wanted = config.get("run_cap") or ALL_RUNS
        runs = [run for run in grid_search_next_runs([], config, validate=False, n=wanted) if run is not None]
    except (ValueError, ValidationError) as exc:
        return {"refused": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    commands = {}
    whole = set(_sample(len(runs), WHOLE))
    for index in _sample(len(runs), MACROS):
        values = server({name: spec["value"] for name, spec in runs[index].config.items()})
        received = {name: {"value": value} for name, value in values.items()}
        commands[index] = {"macros": _macros(received)}
        if index in whole:
            commands[index].update(_command(agent, config, received, index))
    return {"runs": [{name: spec["value"] for name, spec in run.config.items()} for run in runs], "commands": commands}


def _macros(args: dict[str, Any]) -> dict[str, Any]:
    from wandb.sdk.launch.sweeps.utils import create_sweep_command_args

    expanded = create_sweep_command_args({"args": args})
    del expanded["args_dict"]  # not a command macro: the values themselves
    return expanded


def _command(agent: Any, config: dict[str, Any], args: dict[str, Any], index: int) -> dict[str, Any]:
    command = config.get("command")
    # As Agent.run: the file's command when it is a non-empty list, else the default one;
    # a copy, for the agent rewrites ${envvar:NAME} tokens in place.
    agent._sweep_command = list(command) if command and isinstance(command, list) else []
    run_id = f"run{index}"
    json_file = os.path.join(os.environ["WANDB_DIR"], "wandb", "sweep-None", f"config-{run_id}.json")
    if os.path.exists(json_file):
        os.remove(json_file)  # an earlier file's: the agent writes one only when the command names it
    try:
        agent._command_run({"type": "run", "run_id": run_id, "program": config.get("program"), "args": args})
    except Exception as exc:  # the agent fails too (no program: it would need wandb.agent(function=...))
        return {"failed": f"{type(exc).__name__}: {exc}"}
    argv = [str(token) for token in Recorder.last]
    result: dict[str, Any] = {"argv": [ARGS_JSON_FILE if token == json_file else token for token in argv]}
    if os.path.exists(json_file):
        with open(json_file, encoding="utf-8") as file:
            result["args_json_file"] = file.read()
    return result


def _sample(count: int, most: int) -> list[int]:
    """At most `most` run indices spread evenly from the first run to the last."""
    if count <= most:
        return list(range(count))
    step = (count - 1) / (most - 1)
    return sorted({round(i * step) for i in range(most)})


if __name__ == "__main__":
    out = json.dumps(main(sys.argv[1:]))
    sys.stdout.write(out)  # one write: wandb hooks sys.stdout, and json.dump writes piece by piece
