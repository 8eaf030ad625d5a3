"""YAML loading for sweep files.

Sweep files are read as YAML 1.1 with safe loading, exactly as W&B reads its sweep
files, so that values get the same types on both sides (`1e-3` is a string there,
`yes` is true). Two things differ from `yaml.safe_load`:

* a key written twice in one mapping is an error (YAML would silently keep the
  last one, and a sweep file is the wrong place for silent choices);
* every problem becomes a `SpecError` that names the file, line and column;
* the document is bounded (sweepq.spec.limits): its size, its values counted with
  every alias expanded (a "billion laughs" is refused at the alias that crosses the
  limit, before anything is built), its nesting depth, its integers (64-bit) and
  its floats (finite: cfgs are JSON, which has no NaN or infinity).

The loader also notes plain (unquoted) scalars that read as numbers in YAML 1.2 or
JSON but stayed strings under YAML 1.1, so the sweep parser can warn about them.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import yaml

from sweepq.errors import SpecError
from sweepq.spec import limits

_MERGE_TAG = "tag:yaml.org,2002:merge"
_STR_TAG = "tag:yaml.org,2002:str"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"

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
    check_size(filename, len(text))
    check_size(filename, len(text.encode("utf-8", "surrogatepass")))
    loader = _SweepLoader(text, filename)
    try:
        data = loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(filename, exc) from None
    except yaml.YAMLError as exc:  # ReaderError: bytes that are not text
        raise SpecError(f"{filename}: not a readable YAML file: {exc}. Save it as UTF-8 text.") from None
    finally:
        loader.dispose()
    return YamlDocument(data, frozenset(loader.numeric_looking_strings))


def check_size(filename: str, size: int, *, at_least: bool = False) -> None:
    """Refuse a sweep file of `size` bytes (or more, `at_least`) beyond SWEEPQ_MAX_SWEEP_BYTES."""
    limit = limits.max_bytes()
    if size <= limit:
        return
    shown = f"more than {limit:,}" if at_least else f"{size:,}"
    raise SpecError(
        f"{filename}: the file is {shown} bytes, more than the {limit:,} sweepq reads from a sweep file "
        f"({limits.ENV_MAX_BYTES}); a sweep file is a few kilobytes. {limits.raise_hint(limits.ENV_MAX_BYTES, limit)}."
    )


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
    """SafeLoader that bounds the document, rejects duplicate keys and notes numeric-looking strings."""

    def __init__(self, stream: str, filename: str) -> None:
        super().__init__(stream)
        self.filename = filename
        self.numeric_looking_strings: set[str] = set()
        self.max_nodes = limits.max_nodes()
        self.depth = 0  # of the node being composed
        self.composed = 0  # nodes written in the file
        # Per composed node: (values it holds with its aliases expanded, its depth so expanded).
        self.measured: dict[int, tuple[int, int]] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        # Bounds are checked as the document is read, so that the refusal costs no
        # more than the limit, however large the file or its expansion would be.
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            if node is not None:
                self._check_alias(node, event.start_mark)
            return node
        self.depth += 1
        self.composed += 1
        try:
            if self.depth > limits.MAX_DEPTH:
                raise self._depth_error(event.start_mark)
            if self.composed > self.max_nodes:
                raise self._size_error(event.start_mark, "the file holds more than")
            node = super().compose_node(parent, index)
        finally:
            self.depth -= 1
        if node is None:  # no event makes no node (PyYAML's type says it could)
            return None
        values, depth = self._measure(node)
        if values > self.max_nodes:
            raise self._size_error(node.start_mark, "with its aliases expanded, this value holds more than")
        self.measured[id(node)] = (values, depth)
        return node

    def _check_alias(self, node: yaml.Node, mark: Any) -> None:
        measured = self.measured.get(id(node))
        if measured is None:  # its anchor is still being read: the value would contain itself
            raise SpecError(
                f"{self.where(mark)}: this alias refers to a value that contains it, so the value would be "
                "infinite. Remove the alias or point it at another anchor."
            )
        if self.depth + measured[1] > limits.MAX_DEPTH:
            raise self._depth_error(mark)

    def _measure(self, node: yaml.Node) -> tuple[int, int]:
        if isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        elif isinstance(node, yaml.MappingNode):
            children = [child for pair in node.value for child in pair]
        else:
            return 1, 1
        sizes = [self.measured[id(child)] for child in children]
        return 1 + sum(values for values, _ in sizes), 1 + max((depth for _, depth in sizes), default=0)

    def where(self, mark: Any) -> str:
        return f"{self.filename}, line {mark.line + 1}, column {mark.column + 1}"

    def _depth_error(self, mark: Any) -> SpecError:
        return SpecError(
            f"{self.where(mark)}: values nested more than {limits.MAX_DEPTH} deep (lists and mappings inside "
            f"each other, aliases expanded); sweepq reads at most {limits.MAX_DEPTH} levels. Flatten the value, "
            "or put deep data in a file the training reads."
        )

    def _size_error(self, mark: Any, what: str) -> SpecError:
        return SpecError(
            f"{self.where(mark)}: {what} {self.max_nodes:,} values, the most sweepq reads from a sweep file "
            f"({limits.ENV_MAX_NODES}). Nested aliases (*name) that copy anchors (&name) many times over are "
            f"a YAML bomb; remove them. {limits.raise_hint(limits.ENV_MAX_NODES, self.max_nodes)}."
        )

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


def _construct_int(loader: _SweepLoader, node: yaml.ScalarNode) -> int:
    text = loader.construct_scalar(node).replace("_", "")
    value = yaml.SafeLoader.construct_yaml_int(loader, node) if len(text) <= limits.MAX_INT_TEXT else None
    if value is None or not limits.INT_MIN <= value <= limits.INT_MAX:
        shown = text if len(text) <= 30 else f"{text[:12]}…{text[-6:]} ({len(text):,} characters)"
        raise SpecError(
            f"{loader.where(node.start_mark)}: the whole number {shown} is out of range: sweepq holds whole "
            f"numbers from {limits.INT_MIN} to {limits.INT_MAX} (64 bits, what SQLite and most programs store). "
            "Quote it to keep it as text, or write it as a float (1.0e+30)."
        )
    return value


def _construct_float(loader: _SweepLoader, node: yaml.ScalarNode) -> float:
    value: float = yaml.SafeLoader.construct_yaml_float(loader, node)
    if not math.isfinite(value):
        raise SpecError(
            f"{loader.where(node.start_mark)}: {node.value} reads as {value}, and a sweep holds finite numbers "
            "only (cfgs are JSON, which has no NaN or infinity). Write a finite number, or quote it "
            f"('{node.value}') to pass the text."
        )
    return value


_SweepLoader.add_constructor(_STR_TAG, _construct_str)
_SweepLoader.add_constructor(_INT_TAG, _construct_int)
_SweepLoader.add_constructor(_FLOAT_TAG, _construct_float)
