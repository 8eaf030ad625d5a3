# The command-line configurator of a nanoGPT-style script (README.md beside it), run by train.py as
# exec(open('configurator.py').read()): a relative name, opened in whatever folder the script runs in.
# Each argument is a config file to exec (`config/tiny.py`) or `--key=value`, which overrides a global
# of train.py of the same type.
import sys
from ast import literal_eval

for arg in sys.argv[1:]:
    if "=" not in arg:
        assert not arg.startswith("--"), arg
        print(f"Overriding config with {arg}:")
        with open(arg) as f:
            exec(f.read())
        continue
    assert arg.startswith("--"), arg
    key, val = arg[2:].split("=", 1)
    if key not in globals():
        raise ValueError(f"Unknown config key: {key}")
    try:
        attempt = literal_eval(val)
    except (SyntaxError, ValueError):
        attempt = val
    assert type(attempt) is type(globals()[key]), f"{key}: {attempt!r} is not a {type(globals()[key]).__name__}"
    print(f"Overriding: {key} = {attempt}")
    globals()[key] = attempt
