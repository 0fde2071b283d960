"""The manager's intake of host reports (:class:`sova.manager.decisions.core.ManagerCore`'s
Monitor): each host's load into its detector window, its VMs' loads and capacity kept, a
lease closed when its VM shows up on the target, a host back from a silence restarted.

A mixin of the core, apart from its round and its leases because reports arrive in three
forms (one, an ordered batch, a simulated world's arrays) that must leave the same state.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from itertools import compress, repeat
from operator import is_, is_not
from typing import TYPE_CHECKING, cast

import numpy as np

from sova.manager.decisions.fastplan import ArrayWindow, WindowArrays
from sova.manager.decisions.leases import EndReason, LeaseEnd
from sova.manager.decisions.pipeline import Lease
from sova.manager.decisions.placement import Placement
from sova.policy.hotness import _check_utilisation
from sova.policy.hotspot import RESOURCES, UTILISATION_SLACK, HostCapacity, Utilisation, VMLoad

_NONE = object()  # no window (not None: history.get gives None for an unknown host)
_NONES = repeat(None)
_ARRAY_WINDOWS = repeat(ArrayWindow)

# A host's detector window: the core's own view of its window arrays, or a deque put in
# from outside (a restore replays the stored reports into one).
Window = ArrayWindow | deque[Utilisation]


def _checked_batch(
    hosts: Sequence[str],
    util: np.ndarray,
    vms: Sequence[Mapping[str, VMLoad]],
    capacity: Sequence[HostCapacity | None],
) -> np.ndarray:
    """``util`` as a (hosts, 3) float array, or ValueError: one line naming the host, the
    field and the value, before anything of the batch is taken."""
    util = np.asarray(util, dtype=np.float64)
    m = len(hosts)
    if util.shape != (m, 3) or len(vms) != m or len(capacity) != m:
        raise ValueError(
            f"util must be ({m}, 3) with {m} vms and capacities, got {util.shape}, "
            f"{len(vms)}, {len(capacity)}"
        )
    bad = ~np.isfinite(util) | (util < 0.0) | (util > 1.0 + UTILISATION_SLACK)
    if bad.any():
        i, j = (int(x) for x in np.argwhere(bad)[0])
        try:
            _check_utilisation(RESOURCES[j], float(util[i, j]))
        except ValueError as exc:
            raise ValueError(f"host {hosts[i]}: {exc}") from None
    return util


class ReportIntake:
    """The core's fields the intake reads and writes (see ``ManagerCore``)."""

    history: dict[str, Window]
    vms: dict[str, Mapping[str, VMLoad]]
    capacity: dict[str, HostCapacity]
    seen: dict[str, float]
    stale_after_s: float
    leases: dict[str, Lease]
    close_on_arrival: bool
    orphaned: set[str]
    placement: Placement
    located: dict[str, frozenset[str]]
    _skip: dict[str, int]
    _order: tuple[tuple[str, ...], dict[str, int]] | None

    if TYPE_CHECKING:  # the core's

        def windows(self) -> WindowArrays: ...
        def _end(self, lease: Lease, why: EndReason) -> LeaseEnd: ...

    def ingest(
        self,
        host: str,
        load: Utilisation,
        vms: Mapping[str, VMLoad],
        *,
        at: float | None = None,
        capacity: HostCapacity | None = None,
    ) -> list[LeaseEnd]:
        """One host report (Monitor), received at ``at``. Returns the leases it closed."""
        return self.ingest_many(((host, load, vms, capacity),), at=at)

    def ingest_many(
        self,
        reports: Iterable[tuple[str, Utilisation, Mapping[str, VMLoad], HostCapacity | None]],
        *,
        at: float | None = None,
    ) -> list[LeaseEnd]:
        """Host reports ``(host, load, vms, capacity)`` received at ``at``, in order: what
        :meth:`ingest` of each in turn does (a simulated world reports every host each
        period; the checks that depend on the round's state, not on the host, are made once).
        Returns the leases they closed."""
        history = self.history
        skip, stored = self._skip, self.vms
        arrays = self.windows()
        members = self.placement.members
        closed: list[LeaseEnd] = []
        # The leases a report can close, by target: found once per batch, not per report.
        # A batch opens none, and one it closes is no longer in ``leases`` (checked below).
        leases = self.leases
        arriving: dict[str, list[Lease]] = {}
        for vm, lease in leases.items():
            if self.close_on_arrival or vm in self.orphaned:
                arriving.setdefault(lease.dst, []).append(lease)
        for host, load, vms, capacity in reports:
            window = history.get(host)
            if window is None:
                window = history[host] = arrays.window(host)
            if capacity is not None:
                self.capacity[host] = capacity
            if at is not None:
                last = self.seen.get(host)
                if last is not None and at - last > self.stale_after_s:
                    window.clear()  # back from a silence: the old window is not its present
                    arrays.clear(host)
                self.seen[host] = at
            # A VM that shows up on its lease's target has arrived: the lease is done.
            # Closed first, so that this report (it spans the copy) is the one the restart
            # drops.
            if arriving and host in arriving:
                for lease in arriving[host]:
                    if lease.vm in vms and leases.get(lease.vm) is lease:
                        closed.append(self._end(lease, EndReason.ARRIVED))
            if skip and skip.get(host, 0) > 0:
                skip[host] -= 1  # it spans the migration's copy: not the new placement
            else:
                if not isinstance(window, ArrayWindow):
                    window.append(load)
                arrays.append(host, window, load)
            # kept as given unless the caller could change it afterwards (an agent's report
            # builds its VMs' loads when first read: most hosts' are never read)
            stored[host] = dict(vms) if isinstance(vms, MutableMapping) else vms
            if members:
                self.locate(host, vms)
        return closed

    def ingest_arrays(
        self,
        hosts: tuple[str, ...],
        util: np.ndarray,
        vms: Sequence[Mapping[str, VMLoad]],
        capacity: Sequence[HostCapacity | None],
        *,
        at: float | None = None,
    ) -> list[LeaseEnd]:
        """What :meth:`ingest_many` of ``(hosts[i], Utilisation(*util[i]), vms[i],
        capacity[i])`` does, with the loads as one (hosts, 3) array (a simulated world's
        every host each period): the array is validated at once (a bad value fails the whole
        batch before anything changes: one line naming the host, the field and the value)
        and written into the windows in one assignment; no ``Utilisation`` is built. ``hosts``
        are distinct; ``vms`` are kept as given (the caller never changes them). A batch in
        which a lease closes by arrival goes through :meth:`ingest_many` itself (the close
        restarts windows of hosts reported before and after it). Returns the leases closed."""
        util = _checked_batch(hosts, util, vms, capacity)
        m = len(hosts)
        index = self._index_of(hosts)
        leases = self.leases
        arrives = any(
            (self.close_on_arrival or vm in self.orphaned)
            and lease.dst in index
            and vm in vms[index[lease.dst]]
            for vm, lease in leases.items()
        )
        if arrives:  # a lease closes: the ordered path, exactly
            loads = [Utilisation(*r) for r in util.tolist()]
            return self.ingest_many(zip(hosts, loads, vms, capacity, strict=True), at=at)
        history, arrays, caps, skip = self.history, self.windows(), self.capacity, self._skip
        # (every host's reads below through C-level maps, not a Python loop per host: a
        # simulated world hands every host each period)
        given = compress(zip(hosts, capacity, strict=True), map(is_not, capacity, _NONES))
        caps.update(cast(Iterable[tuple[str, HostCapacity]], given))
        if at is not None:
            self._seen_at(hosts, at)
        # the hosts whose window is the core's own view: their loads land in one assignment
        windows = list(map(history.get, hosts))
        own = np.fromiter(
            map(is_, windows, map(arrays.owner.get, hosts, repeat(_NONE))), dtype=bool, count=m
        )
        own &= np.fromiter(map(is_, map(type, windows), _ARRAY_WINDOWS), dtype=bool, count=m)
        take = np.flatnonzero(own).tolist()
        if len(take) < m:  # a host new to the core, or whose window was put in from outside
            for i in sorted(set(range(m)).difference(take)):
                h = hosts[i]
                if h not in history:
                    history[h] = arrays.window(h)
                    take.append(i)
                elif not (skip and skip.get(h, 0) > 0):
                    load = Utilisation(*util[i].tolist())
                    window = history[h]
                    if not isinstance(window, ArrayWindow):
                        window.append(load)
                    arrays.append(h, window, load)
            take.sort()
        if skip:
            dropped = {index[h] for h, left in skip.items() if left > 0 and h in index}
            for i in dropped:
                skip[hosts[i]] -= 1  # it spans the migration's copy: not the new placement
            take = [i for i in take if i not in dropped]
        row = arrays.row
        taken = hosts if len(take) == m else [hosts[i] for i in take]
        at_rows = np.fromiter(map(row.__getitem__, taken), dtype=np.intp, count=len(take))
        arrays.extend(at_rows, util[take] if len(take) < m else util)
        self.vms.update(zip(hosts, vms, strict=True))
        if self.placement.members:
            for h, named in zip(hosts, vms, strict=True):
                self.locate(h, named)
        return []

    def _index_of(self, hosts: tuple[str, ...]) -> dict[str, int]:
        """Host -> its position in ``hosts``, kept while the caller passes the same tuple."""
        order = self._order
        if order is None or order[0] is not hosts:
            index = {h: i for i, h in enumerate(hosts)}
            if len(index) != len(hosts):
                raise ValueError("hosts must be distinct")
            order = self._order = (hosts, index)
        return order[1]

    def _seen_at(self, hosts: Iterable[str], at: float) -> None:
        """``hosts`` reported at ``at``: a host back from a silence starts a new window."""
        history, arrays = self.history, self.windows()
        if math.isfinite(self.stale_after_s):
            seen = self.seen
            for h in hosts:
                last = seen.get(h)
                if last is not None and at - last > self.stale_after_s and h in history:
                    history[h].clear()  # back from a silence: as ingest
                    arrays.clear(h)
        self.seen.update(dict.fromkeys(hosts, at))

    def locate(self, host: str, named: Iterable[str]) -> None:
        """``host`` reported the VMs ``named``: the rules' members among them are there."""
        members = self.placement.members
        if members:
            here = frozenset((host,))
            for vm in members.intersection(named):
                self.located[vm] = here
