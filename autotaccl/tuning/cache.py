"""A synthesis cache on disk: one JSON file per (sketch key, engine, size, solver settings), never pickle.

Several workers may share the directory: a file is written to a temporary name and renamed, so a
reader sees either nothing or a whole entry.
"""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from ..model.algorithm import Algorithm, from_json, to_json

log = logging.getLogger(__name__)


def cache_key(sketch_key: str, engine: str, size: int, mip_gap: float | None = None) -> str:
    gap = "" if mip_gap is None else f"-gap{mip_gap:g}"
    return f"{sketch_key}-{engine}-{size}{gap}"


class SynthesisCache:
    """``get(key)`` / ``put(key, algorithm, info)`` over ``directory/<key>.json``."""

    def __init__(self, directory: str | Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def get(self, key: str) -> tuple[Algorithm, dict[str, Any]] | None:
        path = self._path(key)
        if not path.is_file():
            return None
        try:
            data = json.loads(path.read_text())
            return from_json(data["algorithm"], str(path)), dict(data.get("info", {}))
        except (ValueError, KeyError, TypeError) as err:   # a damaged entry is recomputed, not trusted
            log.warning("ignoring damaged cache entry %s: %s", path, err)
            return None

    def put(self, key: str, algorithm: Algorithm, info: dict[str, Any]) -> None:
        path = self._path(key)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"key": key, "algorithm": to_json(algorithm), "info": info}))
        tmp.replace(path)
