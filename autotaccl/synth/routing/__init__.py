"""Stage 1: which links each chunk crosses (TACCL's routing MILP, taccl.md §4, compact and fixed).

Differences from the reference, on purpose:

* Variables exist only for transfers ``(chunk, src, dst)`` the sketch and the topology allow, on paths
  that stay within ``slack`` hops of the shortest route *inside the sketch* (the reference prunes by
  hop count on the physical graph and ignores the sender map, which makes some sketches infeasible).
* Symmetry removes variables: every orbit of transfers (and of arrival times) under the sketch's
  rotations is one column.
* Single-node sketches work; ``minmax``/``maxmin`` and non-``uc`` switch strategies have objectives.
* Load bounds are per shared resource (the capacity-graph arcs an edge holds: NVLink bundle, switch
  port, PCIe hop, NIC), each transfer costing its bandwidth time (its alpha goes into arrivals only,
  like the reference's ``invbw`` loads: batching pays one alpha for many chunks), so a NIC shared by several logical
  links is counted once.

The objective is the makespan bound ``T >= arrival(c, r)`` and ``T >= load(resource)``.

Modules: :mod:`.candidates` (the links each chunk may cross), :mod:`.symmetry` (rotations, orbits),
:mod:`.model` (building the MILP), :mod:`.start` (the warm start), :mod:`.trees` (sends as trees),
:mod:`.route` (``route``: build, warm start, solve, extract).
"""
from .candidates import chunk_edges
from .route import Routing, RoutingOptions, route
from .symmetry import symmetry_permutations
from .trees import Send, sends_of

__all__ = ["Routing", "RoutingOptions", "Send", "chunk_edges", "route", "sends_of", "symmetry_permutations"]
