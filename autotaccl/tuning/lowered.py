"""The one place tuning talks to the lowering: algorithm -> MSCCL XML text, and the XML checker."""
from __future__ import annotations

from typing import Any, Callable, Sequence

from runners import MSCCL_XML, MSCCLPP_PLAN, Runner

from ..errors import InputError
from ..model.algorithm import Algorithm

XML_RUNTIME = "msccl-executor"     # whose XML trials run and every exported band needs (tuning/export.py)


def lower_xml(algorithm: Algorithm, protocol: str = "Simple", instances: int = 1, min_bytes: int = 0,
              max_bytes: int | None = None, runtime: str = XML_RUNTIME) -> str:
    """MSCCL XML for ``algorithm`` with the tuned protocol and instances, selected for [min_bytes, max_bytes]
    (inclusive; None: no limit) in ``runtime``'s own convention (the lowering converts)."""
    from ..formats.msccl import LoweringOptions, lower

    options: dict[str, Any] = {"proto": protocol, "instances": instances, "min_bytes": min_bytes, "runtime": runtime}
    if max_bytes is not None:
        options["max_bytes"] = max_bytes
    return lower(algorithm, LoweringOptions(**options))


def check(xml_text: str, runtime: str | None = None):
    """The checker's report (``.valid``, ``.first``) for ``xml_text``, in every mode its header enables."""
    from ..formats.msccl import check_xml

    return check_xml(xml_text) if runtime is None else check_xml(xml_text, runtime=runtime)


def lower_plan_text(algorithm: Algorithm, graph, protocol: str, instances: int, min_bytes: int,
                    max_bytes: int | None, inplace: bool) -> str:
    """An MSCCL++ execution plan (JSON text) for [min_bytes, max_bytes], proven by its checker on the way."""
    from ..formats import mscclpp

    options = mscclpp.PlanOptions(inplace=inplace, proto=protocol, instances=instances, min_bytes=min_bytes,
                                  max_bytes=max_bytes)
    return mscclpp.plan_text(mscclpp.lower_plan(algorithm, graph, options))


def plan_protocol(protocol: str) -> str:
    """The protocol an MSCCL++ plan runs for ``protocol`` (it has no LL128: that runs Simple)."""
    from ..formats.mscclpp.plan import PLAN_PROTOCOL

    return PLAN_PROTOCOL.get(protocol, "Simple")


def unmeasured_settings(runner: Runner) -> tuple[str, ...]:
    """The settings a runner's measurement does not apply, so it cannot tell their values apart: a runner of
    the algorithm IR on real hardware (mpi) moves the bytes without a protocol or instances; the simulator
    models both and a runner of a runtime file runs them as lowered."""
    return ("protocol", "instances") if runner.real_hardware and runner.runtime_file is None else ()


def run_settings(protocol: str, instances: int, unmeasured: Sequence[str] = ()) -> tuple[str, int]:
    """The protocol and instances a trial's files run with: Simple x 1 for those its runner cannot tell apart
    (:func:`unmeasured_settings`), as the export writes them."""
    return ("Simple" if "protocol" in unmeasured else protocol, 1 if "instances" in unmeasured else instances)


def lowering(runner: Runner) -> Callable[[Algorithm, str, int], str] | None:
    """How a trial's algorithm (with its protocol and instances) becomes the file ``runner`` runs; None for
    a runner of the algorithm IR."""
    if runner.runtime_file is None:
        return None
    if runner.runtime_file.format == MSCCL_XML.format:
        return lower_xml
    if runner.runtime_file.format == MSCCLPP_PLAN.format:
        return lower_trial_plan
    raise InputError("--runner", runner.name, f"a runner of the IR or of a runtime file tuning writes "
                                              f"({MSCCL_XML.format}, {MSCCLPP_PLAN.format}), not of "
                                              f"{runner.runtime_file.format}")


def lower_trial_plan(algorithm: Algorithm, protocol: str = "Simple", instances: int = 1) -> str:
    """A trial's out-of-place MSCCL++ plan, on the topology its algorithm names (``<profile>x<nodes>``)."""
    from ..model.hardware import load_hardware
    from ..model.topology import build_topology

    profile, _, nodes = (algorithm.topology or "").rpartition("x")
    if not profile or not nodes.isdigit():
        raise InputError(algorithm.name or "algorithm", "topology", "a shipped profile's <name>x<nodes> (the "
                         "plan's channels follow the topology)")
    graph = build_topology(load_hardware(profile), int(nodes))
    return lower_plan_text(algorithm, graph, plan_protocol(protocol), instances, 0, None, False)
