"""The one place tuning talks to the lowering: algorithm -> MSCCL XML text, and the XML checker."""
from __future__ import annotations

from typing import Any

from ..model.algorithm import Algorithm


def lower_xml(algorithm: Algorithm, protocol: str = "Simple", instances: int = 1, min_bytes: int = 0,
              max_bytes: int | None = None) -> str:
    """MSCCL XML for ``algorithm`` with the tuned protocol and instances, selected for [min_bytes, max_bytes]."""
    from ..formats.msccl import LoweringOptions, lower

    options: dict[str, Any] = {"proto": protocol, "instances": instances, "min_bytes": min_bytes}
    if max_bytes is not None:
        options["max_bytes"] = max_bytes
    return lower(algorithm, LoweringOptions(**options))


def check(xml_text: str):
    """The checker's report (``.valid``, ``.first``) for ``xml_text``, in every mode its header enables."""
    from ..formats.msccl import check_xml

    return check_xml(xml_text)
