"""Where the shipped data folders (hardware/, search_spaces/) are, installed or in a checkout."""
from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """``hardware`` or ``search_spaces``: inside the wheel, else at the top of the checkout."""
    installed = _PACKAGE / "_data" / name
    return installed if installed.is_dir() else _PACKAGE.parent / name
