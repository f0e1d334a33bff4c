"""The fast engine (``--engine greedy``): no MILP; a few constructions, the simulator picks the best.

Every construction books transfers on reservation timelines of the capacity-graph arcs each link
holds (:mod:`.timeline`), the same exclusive resources the simulator serialises on, at the cost of
one pipelined round, so the alpha/bandwidth trade-off matches what the simulator charges. The
strategies (:mod:`.strategies`) decide the routes:

* ``earliest`` (:mod:`.earliest`): every chunk where it arrives soonest; a hop may join a transfer
  already booked on its link (one alpha for several chunks, what wins at small sizes);
* ``balanced`` / ``bottleneck`` (:mod:`.balanced`): routes for the least-loaded arcs, then list
  scheduling in which a transfer takes every chunk waiting for its link (what wins at large sizes);
* ``hierarchy`` (:mod:`.hierarchy`): shared per-rank trees and one crossing per node, so chunks batch;
* ``doubling`` / ``relay`` (:mod:`.exchanges`): Bruck exchanges where the sketch makes nodes complete
  graphs (switches), across nodes between same-index peers, or through the sketch's relay pairs;
* ``trees`` (:mod:`.forest`, not a booking strategy): the throughput-optimal packing of spanning
  out-trees (:mod:`autotaccl.synth.packing`) as a pipelined schedule, for AllGather and its
  reductions (what reaches the bound at large sizes on switched fabrics);
* ``rails`` (:mod:`.forest` over :mod:`autotaccl.synth.rails`): one tree per root along the network
  rails, plain, spilled or in pieces (:func:`.forest.rail_schedules`), and a reduction's in slices
  (:func:`.forest.sliced_rails`): what wins across nodes of rail fabrics at any scale, in slices under
  several instances;
* ``switch`` (:mod:`.switch`, first where the runtime runs switch operations and the protocol is
  Simple): load-reduce and store through a switch that reduces (NVLink SHARP), across nodes with the
  direct exchange on the rails, in pieces (what wins at large sizes where the profile has ``nccl.nvls``).

Where each wins, configuration by configuration: ``benchmarks/synthesis.py`` (its latest results in
``benchmarks/results/synthesis.md``; the same list as a table in ``docs/synthesis.md``).

ReduceScatter runs an AllGather backwards over the sketch links' reverses (copies become reduces),
AllReduce is that followed by the AllGather (:mod:`.schedule`). Inter-node hops respect the sketch's
sender map. :func:`greedy` (:mod:`.select`) simulates every applicable variant in two list orders
(dependency depth, planned start), and every baseline the sketch admits, at the target size and
returns the fastest (on big configurations with trees, the routed strategies are left out); every
result passes ``verify``. The sketch's symmetry and enforce_ordering hints
are not needed here and are ignored.
"""
from .schedule import assign_steps, critical_first, greedy_schedule, time_steps
from .select import greedy, sketch_baselines
from .strategies import STRATEGIES
from .strategy import NotApplicable, Strategy

__all__ = ["NotApplicable", "STRATEGIES", "Strategy", "assign_steps", "critical_first", "greedy",
           "greedy_schedule", "sketch_baselines", "time_steps"]
