"""JSON Schemas of gobrrr's --json outputs, versioned with the code, and a validator.

- report.schema.json: `gobrrr doctor --json` (Report.to_dict()); version in
  `schema_version`, equal to report.SCHEMA_VERSION.
- ceilings.schema.json: `gobrrr calibrate --json` (Ceilings.to_dict()); version in
  `schema_version`, equal to hardware.SCHEMA_VERSION.
- lab.schema.json: `gobrrr lab --json` (LabReport.to_dict()); version in `gobrrr_lab`.
- comm_ceilings.schema.json: `gobrrr calibrate --distributed --json`
  (dist.ceilings.CommCeilings.to_dict()); marker `schema: gobrrr.comm_ceilings`.
- projection.schema.json: dist.projection.Projection.to_dict(), embedded in the
  distributed report; marker `schema: gobrrr.projection`.

Validation uses the `jsonschema` package, a dependency imported only inside `validate`
(it checks the ceilings cache on every read, so `import gobrrr` stays light). Should it be
missing, `validate` still checks what `gobrrr compare` relies on (the schema name and
major version), so a CI gate never silently accepts another file kind.
"""

from __future__ import annotations

import json
from functools import cache
from importlib import resources
from typing import Any

from gobrrr.errors import UserError

__all__ = ["SCHEMAS", "load_schema", "validate", "kind_of", "SchemaError"]

# kind -> file; `kind_of` tells a document's kind from its own fields.
SCHEMAS: dict[str, str] = {
    "report": "report.schema.json",
    "ceilings": "ceilings.schema.json",
    "lab": "lab.schema.json",
    "comm_ceilings": "comm_ceilings.schema.json",
    "projection": "projection.schema.json",
}


class SchemaError(UserError):
    """A document that does not match its schema: one line naming the first bad field."""


@cache
def load_schema(kind: str) -> dict[str, Any]:
    if kind not in SCHEMAS:
        raise ValueError(f"unknown schema {kind!r}; one of {sorted(SCHEMAS)}")
    text = resources.files(__name__).joinpath(SCHEMAS[kind]).read_text(encoding="utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


def kind_of(data: Any) -> str | None:
    """'report', 'ceilings', 'lab', 'comm_ceilings', 'projection' or None, from the
    document's own marker fields."""
    if not isinstance(data, dict):
        return None
    if data.get("schema") == "gobrrr.report":
        return "report"
    if data.get("schema") in ("gobrrr.comm_ceilings", "gobrrr.projection"):
        return str(data["schema"]).removeprefix("gobrrr.")
    if "gobrrr_lab" in data:
        return "lab"
    if "peak_flops_per_s" in data and "bandwidth_bytes_per_s" in data:
        return "ceilings"
    return None


def _minimal_check(data: Any, kind: str) -> None:
    if kind_of(data) != kind:
        raise SchemaError(f"not a gobrrr {kind} document")
    if kind == "report" and not str(data.get("schema_version", "")).startswith("1."):
        raise SchemaError(f"report schema_version {data.get('schema_version')!r}: this "
                          "gobrrr reads 1.x")


def validate(data: Any, kind: str | None = None) -> None:
    """Raise SchemaError (a UserError: one line, exit 2) unless `data` matches the schema
    of `kind` (default: told from the data itself)."""
    kind = kind or kind_of(data)
    if kind is None:
        raise SchemaError("not a gobrrr JSON document (no 'schema' marker)")
    try:
        import jsonschema
        from referencing import Registry, Resource
    except ImportError:  # a broken install: keep the gate's essentials
        _minimal_check(data, kind)
        return
    # The report and lab schemas refer to the ceilings schema by its $id (a URN): no
    # network lookup ever happens, every schema is registered here.
    registry: Registry[Any] = Registry().with_resources(
        (s["$id"], Resource.from_contents(s)) for s in map(load_schema, SCHEMAS))
    validator = jsonschema.Draft202012Validator(load_schema(kind), registry=registry)
    errors = sorted(validator.iter_errors(data), key=lambda e: list(e.absolute_path))
    if errors:
        first = errors[0]
        where = "/".join(str(p) for p in first.absolute_path) or "(top level)"
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise SchemaError(f"{kind} JSON does not match its schema at {where}: "
                          f"{first.message}{more}")
