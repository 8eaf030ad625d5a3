"""YAML loading for sweep files.

Sweep files are read as YAML 1.1 with safe loading, exactly as W&B reads its sweep
files, so that values get the same types on both sides (`1e-3` is a string there,
`yes` is true). Two things differ from `yaml.safe_load`:

* a key written twice in one mapping is an error (YAML would silently keep the
  last one, and a sweep file is the wrong place for silent choices);
* every problem becomes a `SpecError` that names the file, line and column.

The loader also notes plain (unquoted) scalars that read as numbers in YAML 1.2 or
JSON but stayed strings under YAML 1.1, so the sweep parser can warn about them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from sweepq.errors import SpecError

_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"

# A number as YAML 1.2 and JSON read it. YAML 1.1 wants a dot and a signed
# exponent in floats, so `1e-3` or `2.5e5` match here yet load as strings.
_NUMBER_1_2 = re.compile(r"^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")

_SYNTAX_HINT = (
    "Fix the YAML at that spot: check the indentation (spaces, not tabs) and quote "
    "values that contain ': ', ' #' or start with one of { } [ ] , & * ! | > % @ `"
)


@dataclass(frozen=True)
class YamlDocument:
    """A loaded sweep file: its data and the plain scalars YAML 1.1 left as strings."""

    data: Any
    numeric_looking_strings: frozenset[str] = field(default_factory=frozenset)


def load_yaml(text: str, filename: str) -> YamlDocument:
    """Load one YAML 1.1 document safely; raise SpecError on any problem.

    `filename` is only used in messages, as the user wrote it.
    """
    loader = _SweepLoader(text)
    loader.filename = filename
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(filename, exc) from None
    except yaml.YAMLError as exc:  # ReaderError: bytes that are not text
        raise SpecError(f"{filename}: not a readable YAML file: {exc}. Save it as UTF-8 text.") from None
    finally:
        loader.dispose()
    return YamlDocument(data, frozenset(loader.numeric_looking_strings))


def _syntax_error(filename: str, exc: yaml.MarkedYAMLError) -> SpecError:
    mark = exc.problem_mark or exc.context_mark
    where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    problem = exc.problem or exc.context or "invalid YAML"
    context = ""
    if exc.context and exc.problem and exc.context_mark:
        context = f" ({exc.context} at line {exc.context_mark.line + 1})"
    if isinstance(exc, yaml.constructor.ConstructorError):  # e.g. a !!python/object tag
        return SpecError(f"{filename}{where}: unsupported YAML value: {problem}{context}. Write plain YAML values.")
    return SpecError(f"{filename}{where}: YAML syntax error: {problem}{context}. {_SYNTAX_HINT}.")


class _SweepLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys and notes numeric-looking strings."""

    filename = "<sweep>"

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.numeric_looking_strings: set[str] = set()

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        if isinstance(node, yaml.MappingNode):
            self._reject_duplicate_keys(node)
        return super().construct_mapping(node, deep=deep)

    def _reject_duplicate_keys(self, node: yaml.MappingNode) -> None:
        # Checked before SafeLoader flattens `<<` merges: keys overriding merged
        # ones are YAML's intended use, keys written twice by hand are not.
        first_seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == _MERGE_TAG:
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                earlier = first_seen.setdefault(key, key_node)
            except TypeError:  # unhashable key: SafeLoader reports it itself
                continue
            if earlier is not key_node:
                raise self._duplicate_key_error(key, earlier, key_node)

    def _duplicate_key_error(self, key: Any, first: yaml.Node, again: yaml.Node) -> SpecError:
        mark = again.start_mark
        return SpecError(
            f"{self.filename}, line {mark.line + 1}, column {mark.column + 1}: duplicate key "
            f"{key!r} in one mapping (first written at line {first.start_mark.line + 1}, column "
            f"{first.start_mark.column + 1}). "
            "YAML would silently keep only the last one; remove one of them or merge their contents."
        )


def _construct_str(loader: _SweepLoader, node: yaml.ScalarNode) -> str:
    value = loader.construct_scalar(node)
    if node.style is None and _NUMBER_1_2.match(value):
        loader.numeric_looking_strings.add(value)
    return value


_SweepLoader.add_constructor(_STR_TAG, _construct_str)
