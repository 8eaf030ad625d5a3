"""A Hydra app in the shape of Hydra's tutorial composition example (README.md beside it).

`conf/config.yaml` picks a database from the config group `db/` (mysql or postgresql); the command
line overrides the choice (`db=postgresql`) and keys inside it (`db.user=alice`). The app "trains"
for `steps` steps, keeps its state in Hydra's output folder (state.json), continues from it when it
finds it there, and writes result.json at the end.
"""

import json
import os
import time

import hydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, OmegaConf


@hydra.main(version_base=None, config_path="conf", config_name="config")
def my_app(cfg: DictConfig) -> None:
    out = HydraConfig.get().runtime.output_dir
    state_file = os.path.join(out, "state.json")
    step = 0
    if os.path.exists(state_file):
        with open(state_file) as f:
            step = json.load(f)["step"]
        print(f"resumed at step {step} in {out}", flush=True)
    print(OmegaConf.to_yaml(cfg), flush=True)
    while step < cfg.steps:
        step += 1
        time.sleep(cfg.delay)
        with open(state_file + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(state_file + ".tmp", state_file)
        print(f"step {step}", flush=True)
    result = {"driver": cfg.db.driver, "user": cfg.db.user, "steps": step}
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f)
    print(f"done: {result}", flush=True)


if __name__ == "__main__":
    my_app()
