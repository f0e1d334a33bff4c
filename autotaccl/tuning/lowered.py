"""The one place tuning talks to the lowering: algorithm -> MSCCL XML text, and the XML checker."""
from __future__ import annotations

from typing import Any, Callable

from runners import MSCCL_XML, Runner

from ..errors import InputError
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


def lowering(runner: Runner) -> Callable[[Algorithm, str, int], str] | None:
    """How a trial's algorithm (with its protocol and instances) becomes the file ``runner`` runs; None for
    a runner of the algorithm IR."""
    if runner.runtime_file is None:
        return None
    if runner.runtime_file.format == MSCCL_XML.format:
        return lower_xml
    raise InputError("--runner", runner.name, f"a runner of the IR or of a runtime file tuning writes "
                                              f"({MSCCL_XML.format}), not of {runner.runtime_file.format}")
