"""docs/openapi.json, the OpenAPI 3.1 document generated from the wire types, checked from outside Rust:
valid for a real validator, and the Python SDK's models (sdk/python/sandlot/models.py) agreeing with it.

Run: "$(scripts/openapi-venv.sh)/bin/pytest" -q tests/openapi
"""

from __future__ import annotations

import collections.abc
import dataclasses
import importlib.util
import json
import sys
import typing
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

import jsonschema
import pytest
from openapi_spec_validator import validate
from openapi_spec_validator.validation.exceptions import OpenAPIValidationError

ROOT = Path(__file__).resolve().parents[2]


def _load_models() -> Any:
    """sdk/python/sandlot/models.py alone (standard library only: the package's httpx is not needed)."""
    spec = importlib.util.spec_from_file_location("sandlot_models", ROOT / "sdk/python/sandlot/models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


models = _load_models()

DOC: Dict[str, Any] = json.loads((ROOT / "docs" / "openapi.json").read_text())
SCHEMAS: Dict[str, Any] = DOC["components"]["schemas"]

# Each dataclass of models.py that mirrors a wire type: the schema it reads, and for one line of a
# tagged stream the values of `type` it stands for.
MIRRORS: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "Limits": ("Limits", ()),
    "NetworkInfo": ("NetworkInfo", ()),
    "SandboxInfo": ("SandboxInfo", ()),
    "CommandResult": ("ExecResult", ()),
    "Started": ("ExecEvent", ("started",)),
    "Output": ("ExecEvent", ("stdout", "stderr")),
    "Truncated": ("ExecEvent", ("truncated",)),
    "Exited": ("ExecEvent", ("exited",)),
    "ProcessInfo": ("ProcessInfo", ()),
    "FileStat": ("FileStat", ()),
    "WriteResult": ("WriteResult", ()),
    "SnapshotInfo": ("SnapshotInfo", ()),
    "PortInfo": ("PortInfo", ()),
    "ImageLayer": ("ImageLayer", ()),
    "ImageInfo": ("ImageInfo", ()),
    "KeyCreated": ("KeyCreated", ()),
    "Health": ("Health", ()),
}

# Fields the SDK adds that are not on the wire, with where they come from.
SDK_ONLY = {
    ("CommandResult", "pid"): "the pid of the stream's `started` line or of the background exec",
    ("Output", "stream"): "the line's `type` (`stdout` or `stderr`)",
}

# Dataclasses that are no wire type's mirror, and why; NetworkPolicy is checked by what it sends.
NOT_MIRRORS = {
    "NetworkPolicy": "a request body: its to_json() is validated against NetworkSpec below",
    "ProgressEvent": "any line of a pull, import or build stream, kept as its type and raw fields",
}


def test_the_document_is_valid_openapi_3_1() -> None:
    assert DOC["openapi"].startswith("3.1.")
    validate(DOC)


def test_the_validator_refuses_a_broken_document() -> None:
    """The validation above can fail: an operation without answers is refused."""
    broken = json.loads(json.dumps(DOC))
    broken["paths"]["/v1/sandboxes"]["post"]["responses"] = {}
    with pytest.raises(OpenAPIValidationError):
        validate(broken)


def test_every_dataclass_is_mapped() -> None:
    classes = {name for name, c in vars(models).items() if dataclasses.is_dataclass(c) and c.__module__ == models.__name__}
    assert classes == set(MIRRORS) | set(NOT_MIRRORS), "map each new dataclass of models.py to its wire type"


def resolve(schema: Dict[str, Any]) -> Dict[str, Any]:
    while "$ref" in schema:
        ref = schema["$ref"]
        assert ref.startswith("#/components/schemas/"), ref
        schema = {**SCHEMAS[ref.rsplit("/", 1)[1]], **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def branches(schema: Dict[str, Any]) -> typing.List[Dict[str, Any]]:
    """The alternatives a value may match, references followed."""
    schema = resolve(schema)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return [b for s in schema[key] for b in branches(s)]
    return [schema]


def json_types(schema: Dict[str, Any]) -> set:
    types: set = set()
    for b in branches(schema):
        t = b.get("type")
        if isinstance(t, list):
            types.update(t)
        elif t is not None:
            types.add(t)
        elif "enum" in b or "const" in b:
            values = b.get("enum", [b.get("const")])
            types.update("null" if v is None else "string" if isinstance(v, str) else "number" for v in values)
    return types


def ref_name(schema: Dict[str, Any]) -> Optional[str]:
    """The schema name a property refers to (through a nullable `anyOf`)."""
    names = [s["$ref"].rsplit("/", 1)[1] for s in schema.get("anyOf", [schema]) if "$ref" in s]
    return names[0] if names else None


def without_null(schema: Dict[str, Any]) -> Dict[str, Any]:
    """The schema of the values other than null."""
    if isinstance(schema.get("type"), list):
        rest = [t for t in schema["type"] if t != "null"]
        return {**schema, "type": rest[0] if len(rest) == 1 else rest}
    if "anyOf" in schema:
        rest = [s for s in schema["anyOf"] if s != {"type": "null"}]
        return rest[0] if len(rest) == 1 else {**schema, "anyOf": rest}
    return schema


def compatible(py: Any, schema: Dict[str, Any], where: str) -> None:
    """Asserts that a value of the schema reads as Python type `py` (what the SDK's from_json builds)."""
    origin, args = typing.get_origin(py), typing.get_args(py)
    types = json_types(schema)
    if origin is typing.Union:
        rest = [a for a in args if a is not type(None)]
        assert len(rest) == 1, f"{where}: {py}"
        compatible(rest[0], without_null(schema), where)
        return
    assert "null" not in types, f"{where}: the server may send null, the SDK's type {py} has no None"
    if py is Any:
        return
    if py is bool:
        assert types == {"boolean"}, f"{where}: {types}"
    elif py is int:
        assert types == {"integer"}, f"{where}: {types}"
    elif py is float:
        assert types <= {"number", "integer"} and types, f"{where}: {types}"
    elif py is str:
        assert types == {"string"}, f"{where}: {types}"
    elif origin is typing.Literal:
        values = {v for b in branches(schema) for v in b.get("enum", [b.get("const")])}
        assert set(args) == values, f"{where}: the SDK says {set(args)}, the server {values}"
    elif origin in (list, collections.abc.Sequence):
        assert types == {"array"}, f"{where}: {types}"
        compatible(args[0], resolve(schema)["items"], f"{where}[]")
    elif origin in (dict, collections.abc.Mapping):
        assert types == {"object"}, f"{where}: {types}"
        values = resolve(schema).get("additionalProperties")
        if args[1] is not Any:
            assert isinstance(values, dict), f"{where}: a map in the SDK, an object of fixed fields in the document"
            compatible(args[1], values, f"{where}{{}}")
    elif dataclasses.is_dataclass(py):
        assert ref_name(schema) == MIRRORS[py.__name__][0], f"{where}: {py.__name__} reads {ref_name(schema)}"
    else:
        raise AssertionError(f"{where}: no rule for the SDK's type {py}")


def variant(schema_name: str, tag: str) -> Dict[str, Any]:
    for v in SCHEMAS[schema_name]["oneOf"]:
        if v["properties"]["type"].get("const") == tag:
            return v
    raise AssertionError(f"{schema_name} has no `{tag}` line")


@pytest.mark.parametrize("name", sorted(MIRRORS))
def test_a_models_fields_are_the_wire_types_with_compatible_types(name: str) -> None:
    cls = getattr(models, name)
    schema_name, tags = MIRRORS[name]
    hints = typing.get_type_hints(cls, vars(models))
    for schema in [variant(schema_name, t) for t in tags] or [SCHEMAS[schema_name]]:
        props, required = schema["properties"], set(schema.get("required", []))
        for f in dataclasses.fields(cls):
            where = f"{name}.{f.name}"
            if (name, f.name) in SDK_ONLY:
                assert f.name not in props, f"{where} is on the wire now: check it against the document"
                continue
            assert f.name in props, f"{where} is not a field of {schema_name} ({sorted(props)})"
            compatible(hints[f.name], props[f.name], where)
            has_default = f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
            if f.name not in required:
                assert has_default, f"{where}: the server may leave it out, the SDK needs it"


def test_the_type_check_can_fail() -> None:
    """The checks above catch a model that disagrees with the document."""
    with pytest.raises(AssertionError):
        compatible(int, SCHEMAS["SandboxInfo"]["properties"]["id"], "id as int")
    with pytest.raises(AssertionError):
        compatible(str, SCHEMAS["SandboxInfo"]["properties"]["reason"], "reason without None")
    with pytest.raises(AssertionError):
        compatible(typing.Literal["deny", "allow"], SCHEMAS["NetworkInfo"]["properties"]["mode"], "mode")


def schema_validator(name: str) -> jsonschema.protocols.Validator:
    """A 2020-12 validator of one schema of the document, its references resolved in the document."""
    from referencing import Registry, Resource
    from referencing.jsonschema import DRAFT202012

    registry = Registry().with_resource("urn:sandlot-openapi", Resource(contents=DOC, specification=DRAFT202012))
    schema = {"$ref": f"urn:sandlot-openapi#/components/schemas/{name}"}
    return jsonschema.Draft202012Validator(schema, registry=registry)


def test_the_sdks_network_policy_is_a_valid_network_spec() -> None:
    validator = schema_validator("NetworkSpec")
    for policy in [
        models.NetworkPolicy(),
        models.NetworkPolicy(mode="allow-all", deny=["198.51.100.0/24"]),
        models.NetworkPolicy(
            mode="allowlist",
            allow=["api.example.com", "*.pypi.org", "203.0.113.0/24"],
            rules={"api.example.com": {"authorization": "Bearer sk-x"}},
        ),
    ]:
        validator.validate(policy.to_json())
    # and the schema refuses what the server refuses
    assert not validator.is_valid({"mode": "allowlist", "allowed": []})
    assert not validator.is_valid({"mode": "open"})
