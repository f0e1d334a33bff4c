"""Reading a JSON or YAML file a user gave us (anything unreadable is one InputError naming file and line),
and writing our own YAML documents.

YAML is only ever parsed with ``yaml.safe_load`` (and composed, never constructed, to find duplicate keys).
Both formats take a UTF-8 byte-order mark and refuse a key given twice in one mapping (JSON and YAML
parsers would silently keep the last value).
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
        text = path.read_text(encoding="utf-8-sig")      # a leading BOM is dropped, for JSON and YAML alike
    except UnicodeDecodeError:
        raise InputError(str(path), "file", "a UTF-8 text file") from None
    fmt = fmt or ("json" if path.suffix.lower() == ".json" else "yaml")
    try:
        if fmt == "json":
            return json.loads(text, object_pairs_hook=lambda pairs: _unique(pairs, path))
        _unique_yaml(yaml.compose(text, Loader=yaml.SafeLoader), path)
        return yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise InputError(str(path), f"line {err.lineno}", f"valid JSON ({err.msg})") from None
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        raise InputError(str(path), f"line {mark.line + 1}" if mark else "document", "valid YAML") from None
    except RecursionError:
        raise InputError(str(path), "document", TOO_DEEP) from None


def _unique(pairs: list[tuple[str, Any]], path: Path) -> dict:
    """A JSON object's pairs as a dict, each key once."""
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise InputError(str(path), repr(key), "each key once in an object (it is given twice)")
        out[key] = value
    return out


def _unique_yaml(root: yaml.Node | None, path: Path) -> None:
    """Refuse a mapping of the composed YAML document that has a key twice (aliases are walked once)."""
    seen: set[int] = set()
    todo = [root] if root is not None else []
    while todo:
        node = todo.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: set[tuple[str, str]] = set()
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode) and key.tag != "tag:yaml.org,2002:merge":
                    if (key.tag, key.value) in keys:
                        raise InputError(str(path), f"line {key.start_mark.line + 1}",
                                         f"each key once in a mapping ({key.value!r} is given twice)")
                    keys.add((key.tag, key.value))
                todo += [key, value]
        elif isinstance(node, yaml.SequenceNode):
            todo += node.value


def yaml_text(data: Any) -> str:
    """``data`` (plain lists, mappings and scalars) as YAML that ``read_document`` reads back equal."""
    return yaml.safe_dump(data, sort_keys=False)


def write_yaml(data: Any, path: Path) -> Path:
    """Write ``data`` as YAML atomically (a reader sees the old file or the whole new one)."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(yaml_text(data))
    tmp.replace(path)
    return path
