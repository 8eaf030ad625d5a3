"""A list written as JSON item by item: byte for byte as `app.print_json` writes it whole, or one
item a line (each item's text as `json.dumps` writes it without indent, made by the caller) for a
program or a file to read.

`json.dumps(..., indent=2)` runs the standard library's pure-Python encoder (its C encoder
knows no indent); on `status --json` of 100,000 cells that alone took several seconds and held
the whole list. Indented, each item is encoded by a short recursive function over the plain values
JSON decoding gives (str, int, float, bool, None, list, dict with str keys), with the C string
escaper; anything else (another key type, a non-finite float, an object needing `default=str`)
goes through `json.dumps` itself, so the output and the errors stay those of `print_json`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from typing import IO, Any

_escape = json.encoder.encode_basestring_ascii  # what json.dumps uses for ensure_ascii=True


def write_list(items: Iterable[Any], out: IO[str]) -> None:
    """`print_json(list(items))`, written as the items come (a trailing newline, as click.echo adds)."""
    _framed((encode(item, "  ") for item in items), out, "  ")


def write_texts(texts: Iterable[str], out: IO[str], lines: bool) -> None:
    """The list of the items whose JSON `texts` are (one line each, as `json.dumps` writes it): with
    `lines` one item a line (`[`, each item and its comma, `]`), else as `write_list` writes it."""
    if lines:
        _framed(texts, out, "")
    else:  # a terminal: few cells are read there, indented for the eye
        write_list(map(json.loads, texts), out)


def _framed(texts: Iterable[str], out: IO[str], pad: str) -> None:
    first = True
    for text in texts:
        out.write(("[\n" if first else ",\n") + pad)
        out.write(text)
        first = False
    out.write("[]\n" if first else "\n]\n")


def encode(v: Any, pad: str) -> str:
    """`v` as `json.dumps(v, indent=2, default=str, allow_nan=False)` spells it, its lines after the
    first indented by `pad` (where it sits in the enclosing value)."""
    if isinstance(v, str):
        return _escape(v)
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if type(v) is int:
        return int.__repr__(v)
    if type(v) is float and math.isfinite(v):
        return float.__repr__(v)
    if type(v) is dict:
        if not v:
            return "{}"
        if not all(type(k) is str for k in v):
            return _fallback(v, pad)
        inner = pad + "  "
        items = (f"{_escape(k)}: {encode(x, inner)}" for k, x in v.items())
        return "{\n" + inner + (",\n" + inner).join(items) + "\n" + pad + "}"
    if type(v) is list:
        if not v:
            return "[]"
        inner = pad + "  "
        return "[\n" + inner + (",\n" + inner).join(encode(x, inner) for x in v) + "\n" + pad + "]"
    return _fallback(v, pad)


def _fallback(v: Any, pad: str) -> str:
    return json.dumps(v, indent=2, default=str, allow_nan=False).replace("\n", "\n" + pad)
