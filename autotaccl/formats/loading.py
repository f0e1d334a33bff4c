"""Which runtime loads a schedule: the :class:`~autotaccl.synth.Loader` synthesis checks its candidates
with (``SynthOptions.runtime``), one per runtime the lowerings write for.

A candidate loads when its lowering with the run's protocol and instances fits every limit of the
runtime (``formats.msccl.program.LIMITS``: XML nodes and thread blocks per rank, steps per thread
block, ...; ``formats.mscclpp.plan``: resident thread blocks, operations per thread block, ...): the
lowering itself decides, so synthesis and the files a user writes never disagree. Only MSCCL++ runs
switch operations (its plans' switch channels, ``Loader.switch``); MSCCL XML has none, so the XML
lowerings refuse a schedule with any and synthesis for those runtimes offers none.
"""
from __future__ import annotations

import networkx as nx

from ..errors import ParameterError
from ..model.algorithm import Algorithm
from ..synth import Loader
from . import msccl, mscclpp
from .msccl.program import RUNTIMES as XML_RUNTIMES
from .mscclpp.plan import PLAN_PROTOCOL

MSCCLPP = "mscclpp"
RUNTIMES = XML_RUNTIMES + (MSCCLPP,)


def loader(runtime: str, graph: nx.DiGraph | None = None) -> Loader:
    """The :class:`Loader` of ``runtime``: an MSCCL XML runtime (``msccl-executor``, ``msccl``), or
    ``mscclpp``, whose plans need the topology ``graph`` the algorithm runs on (an LL128 run's plan
    runs Simple, as the export writes it)."""
    if runtime in XML_RUNTIMES:
        def lower(algorithm: Algorithm, protocol: str, instances: int) -> None:
            msccl.lower_program(algorithm, msccl.LoweringOptions(instances=instances, proto=protocol, runtime=runtime))
    elif runtime == MSCCLPP:
        if graph is None:
            raise ParameterError("graph", "None", "the topology an MSCCL++ plan runs on")

        def lower(algorithm: Algorithm, protocol: str, instances: int) -> None:
            options = mscclpp.PlanOptions(proto=PLAN_PROTOCOL[protocol], instances=instances)
            mscclpp.lower_plan(algorithm, graph, options)
    else:
        raise ParameterError("runtime", repr(runtime), f"one of: {', '.join(RUNTIMES)}")

    last: tuple = (None, None, None, None)      # the last question (algorithm, protocol, instances), its answer

    def problem(algorithm: Algorithm, protocol: str, instances: int) -> str | None:
        """Why ``runtime`` cannot load ``algorithm``; the same object asked again right after (greedy asks
        for its lead schedule in each of its two choices) gets the answer of its one lowering."""
        nonlocal last
        if last[0] is algorithm and last[1:3] == (protocol, instances):
            return last[3]
        try:
            lower(algorithm, protocol, instances)
            answer = None
        except (msccl.LoweringError, mscclpp.LoweringError) as err:
            answer = f"{runtime}: {err}"
        last = (algorithm, protocol, instances, answer)
        return answer

    return Loader(runtime, problem, switch=runtime == MSCCLPP)
