"""Reading a JSON or YAML file a user gave us (anything unreadable is one InputError naming file and line),
and writing our own YAML documents.

YAML is only ever parsed with ``yaml.safe_load``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from .errors import InputError
from .safety import TOO_DEEP


def read_document(path: Path, fmt: str | None = None) -> Any:
    """``path`` parsed as JSON (``fmt="json"``, or a ``.json`` suffix by default) or YAML."""
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise InputError(str(path), "file", "a UTF-8 text file") from None
    fmt = fmt or ("json" if path.suffix.lower() == ".json" else "yaml")
    try:
        return json.loads(text) if fmt == "json" else yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise InputError(str(path), f"line {err.lineno}", f"valid JSON ({err.msg})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise InputError(str(path), f"line {mark.line + 1}" if mark else "document", "valid YAML") from None
    except RecursionError:
        raise InputError(str(path), "document", TOO_DEEP) from None


def yaml_text(data: Any) -> str:
    """``data`` (plain lists, mappings and scalars) as YAML that ``read_document`` reads back equal."""
    return yaml.safe_dump(data, sort_keys=False)


def write_yaml(data: Any, path: Path) -> Path:
    """Write ``data`` as YAML atomically (a reader sees the old file or the whole new one)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml_text(data))
    tmp.replace(path)
    return path
