"""A synthesis cache on disk: one JSON file per configuration, never pickle.

A configuration is everything synthesis depends on: the collective, the sketch, the topology (its
profile's numbers and the node count, not only its shape) and every solver setting. Two sweeps that
share ``--out`` share the cache, and reuse each other's algorithms only for equal configurations.

Several workers may share the directory: a file is written to a temporary name and renamed, so a
reader sees either nothing or a whole entry.
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from ..model.algorithm import Algorithm, from_json, to_json
from ..synth import SynthOptions

log = logging.getLogger(__name__)


def cache_key(collective: str, sketch_key: str, topology: str, options: SynthOptions) -> str:
    """``<collective>-<sketch key>-<engine>-<size>-<topology fingerprint>-<hash of every solver setting>``."""
    digest = hashlib.sha256(json.dumps(options.settings(), sort_keys=True).encode()).hexdigest()[:8]
    return f"{collective}-{sketch_key}-{options.engine}-{options.size}-{topology}-{digest}"


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
