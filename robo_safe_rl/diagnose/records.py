"""Read an ``incidents.jsonl`` strictly and within bounds: every line a schema-1 record, or an error naming it.

Unlike :func:`~robo_safe_rl.bridge.incidents.read_incidents`, which skips a truncated last line (what a crash
mid-write leaves) and trusts the rest, a diagnosis refuses

- a file bigger than :attr:`Limits.jsonl_bytes` (checked with ``stat`` first: a sparse file of gigabytes of zero
  bytes costs no disk), a line longer than :attr:`Limits.line_bytes` (lines are read with that bound, never whole),
  more than :attr:`Limits.records` lines;
- a line that is not strict JSON (``NaN`` and ``Infinity`` literals are not: the recorder writes ``"nan"``), that is
  nested too deeply to parse, or not valid UTF-8; a truncated last line (remove it to diagnose the others);
- an unknown record format, a record that breaks the schema (:func:`~robo_safe_rl.diagnose.schema.check_record`),
  two records with the same id.

Each raises :class:`~robo_safe_rl.errors.IncidentError` with ``<file>:<line>`` and what is wrong.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, BinaryIO

from robo_safe_rl.bridge.incidents import JSONL_NAME, SCHEMA_VERSION
from robo_safe_rl.diagnose.limits import Limits, mib, open_regular
from robo_safe_rl.diagnose.schema import check_record, show
from robo_safe_rl.errors import IncidentError


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON (the recorder writes non-finite floats as strings)")


def read_records(directory: Path, limits: Limits) -> list[dict[str, Any]]:
    """Every record of ``directory/incidents.jsonl``, checked (module docstring).

    Raises:
        IncidentError: Naming the file, the line and what is wrong with it.
    """
    path = directory / JSONL_NAME
    try:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            if size > limits.jsonl_bytes:
                raise IncidentError(
                    f"{path}: {mib(size)}, more than the {mib(limits.jsonl_bytes)} an incident file may hold"
                )
            return _parse_lines(f, path, limits)
    except OSError as err:
        raise IncidentError(f"{path}: cannot read it ({err})") from err


def _parse_lines(f: BinaryIO, path: Path, limits: Limits) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    ids: dict[int, int] = {}
    read = 0
    number = 0
    while True:
        line = f.readline(limits.line_bytes + 1)
        if not line:
            return records
        number += 1
        read += len(line)
        where = f"{path}:{number}"
        if len(line) > limits.line_bytes:
            raise IncidentError(f"{where}: a line longer than {mib(limits.line_bytes)}; not an incident record")
        if read > limits.jsonl_bytes:  # the file grew while being read
            raise IncidentError(f"{path}: more than the {mib(limits.jsonl_bytes)} an incident file may hold")
        if not line.strip():
            continue
        if number > limits.records:
            raise IncidentError(f"{where}: more than the {limits.records} records an incident file may hold")
        record = _parse(line, where)
        check_record(record, where, limits)
        if record["id"] in ids:
            raise IncidentError(f"{where}: record id {record['id']} repeats that of line {ids[record['id']]}")
        ids[record["id"]] = number
        records.append(record)


def _parse(line: bytes, where: str) -> Any:
    try:
        record = json.loads(line.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as err:
        raise IncidentError(f"{where}: not UTF-8 text ({err})") from err
    except RecursionError as err:
        raise IncidentError(f"{where}: JSON nested too deeply to be an incident record") from err
    except ValueError as err:  # JSONDecodeError, NaN literals, integers of more than 4,300 digits
        if not line.endswith(b"\n"):
            raise IncidentError(
                f"{where}: truncated record (no newline at the end, the writer stopped mid-line); remove that line "
                "to diagnose the others"
            ) from err
        raise IncidentError(f"{where}: not a JSON incident record ({err})") from err
    schema = record.get("schema") if isinstance(record, dict) else None
    if schema != SCHEMA_VERSION or isinstance(schema, bool):
        raise IncidentError(
            f"{where}: unknown incident record format (schema={show(schema)}), expected schema {SCHEMA_VERSION}"
        )
    return record
