"""Young garbage collections paced by the event loop, so that none of them is long.

CPython starts a young (generation 0) collection when the objects allocated minus those
freed since the last one pass a threshold. A manager in steady state frees about as many
objects as it makes: each report's state (HostState, its Utilisation, VMLoads, dicts)
replaces the host's previous one. So that count stays near zero while the young
generation fills with a whole period of reports, and the collection that finally runs,
set off by a burst of allocations (a round's result, a /metrics scrape), walks all of them.
Measured at 10,000 hosts and 1,000 reports/s (issue 37): ~175,000 objects in generation 0,
100-240 ms with the GIL held, the largest pause of the event loop; every report arriving
then waited for it.

:func:`young_collections` collects generations 0 and 1 every ``period_s`` instead, from the
event loop: each pass walks only what the last ``period_s`` made and still holds (a few
thousand objects at 1,000 reports/s, a few ms), and survivors go to the old generation,
which only a full collection walks. Full collections stay as rare as they were (the
threshold of the old generation, :func:`thresholds`).
"""

from __future__ import annotations

import asyncio
import gc

# Young collections this often: at 1,000 reports/s a quarter second of reports is ~5,000
# young objects, a ~3 ms pass; a pass has a fixed cost of well under a ms.
PACE_S = 0.25
# Generation 0 when the pacing falls behind (a burst between two passes): a pass over at
# most this many new objects (~30 ms at 10,000 hosts' heap) rather than the whole burst.
YOUNG_THRESHOLD = 50_000
# Every paced pass counts once towards a full collection; at 4 a second this keeps full
# passes (~1 s over 10,000 hosts' state) days apart, as before the pacing, when one came
# after 1,000 x 50 collections of 50,000 allocations each.
OLD_THRESHOLD = 1_000_000


def thresholds() -> tuple[int, int, int]:
    """The collector's thresholds for a paced manager (``gc.set_threshold(*thresholds())``)."""
    return YOUNG_THRESHOLD, 50, OLD_THRESHOLD


async def young_collections(period_s: float = PACE_S) -> None:
    """Collect generations 0 and 1 every ``period_s``, forever (cancel to stop)."""
    while True:
        await asyncio.sleep(period_s)
        gc.collect(1)
