"""A sweep's PostgreSQL schema: one per sweep name, safe in SQL, distinct names never sharing one."""

from __future__ import annotations

import pytest

from sweepq.queue.pg_schema import MAX_IDENTIFIER, PREFIX, execution_options, quoted, sweep_schema


def test_plain_names_read_as_they_are() -> None:
    assert sweep_schema("llm_analysis") == "sweep_llm_analysis"
    assert execution_options("llm_analysis") == {"schema_translate_map": {None: "sweep_llm_analysis"}}


@pytest.mark.parametrize(
    "names",
    [
        ("llm-analysis", "llm_analysis", "LLM-analysis", "llm.analysis"),
        ("a" * 80, "a" * 81, "a" * 57, "a" * 58),  # past PostgreSQL's 63 bytes the server would cut them
        ("résumé", "r_sum_", "ré", '"; DROP SCHEMA public; --'),
    ],
)
def test_every_name_gets_a_safe_schema_of_its_own(names: tuple[str, ...]) -> None:
    schemas = [sweep_schema(n) for n in names]
    assert len(set(schemas)) == len(names)
    for s in schemas:
        assert s.startswith(PREFIX) and len(s.encode()) <= MAX_IDENTIFIER
        assert s.replace("_", "").isalnum() and s.isascii() and s == s.lower()
        assert quoted(s) == f'"{s}"'
    assert [sweep_schema(n) for n in names] == schemas  # the same on every machine


def test_no_name_and_foreign_schemas_are_refused() -> None:
    for bad in ("", "   "):
        with pytest.raises(ValueError, match="needs a name"):
            sweep_schema(bad)
    with pytest.raises(ValueError, match="not a sweep schema"):
        quoted('x"; DROP TABLE cells; --')
