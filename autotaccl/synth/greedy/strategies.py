"""The strategies :func:`~.select.greedy` tries, in this order (on equal times the earlier one is kept)."""
from __future__ import annotations

from .balanced import balanced, bottleneck
from .earliest import earliest
from .exchanges import doubling, relay
from .hierarchy import hierarchy
from .strategy import Strategy

STRATEGIES: dict[str, Strategy] = {
    "earliest": Strategy(earliest, small_only=True),
    "balanced": Strategy(balanced),
    "bottleneck": Strategy(bottleneck),
    "hierarchy": Strategy(hierarchy),
    "doubling": Strategy(doubling, routed=False),
    "relay": Strategy(relay, routed=False),
}
