"""One clock for every world: simulated and real time behind one interface, and the one
schedule of an agent's phases driven by either."""

from __future__ import annotations

import threading

from sova.agent.schedule import BANDWIDTH, POLL, STEP, PhaseSchedule
from sova.clock import Environment, RealtimeEnvironment


class FakeWall:
    """A wall clock that moves only when told (or when the environment sleeps on it)."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class SleepOnFake(threading.Event):
    def __init__(self, wall: FakeWall) -> None:
        super().__init__()
        self.wall = wall
        self.slept: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        assert timeout is not None
        self.slept.append(timeout)
        self.wall.t += timeout
        return self.is_set()


def test_events_run_in_time_then_insertion_order() -> None:
    env = Environment()
    seen: list[str] = []
    env.schedule(2.0, lambda: seen.append("b"))
    env.schedule(1.0, lambda: seen.append("a"))
    env.schedule(2.0, lambda: seen.append("c"))
    assert env.run(until=1.5)
    assert seen == ["a"] and env.now == 1.5
    assert env.run(until=3.0)
    assert seen == ["a", "b", "c"] and env.now == 3.0


def test_realtime_environment_sleeps_until_each_event() -> None:
    wall = FakeWall()
    stop = SleepOnFake(wall)
    env = RealtimeEnvironment(factor=0.5, stop=stop, clock=wall)
    seen: list[float] = []
    env.schedule(4.0, lambda: seen.append(wall.t))
    assert env.run(until=6.0)
    # 0.5 real seconds per unit: the event at 4 runs 2 s in, the clock ends 3 s in
    assert seen == [102.0]
    assert stop.slept == [2.0, 1.0]
    assert env.now == 6.0 and env.behind() == 0.0


def test_a_stopped_realtime_clock_ends_its_wait() -> None:
    stop = threading.Event()
    stop.set()
    env = RealtimeEnvironment(stop=stop)
    assert not env.run(until=5.0)


def test_schedule_counts_whole_ticks() -> None:
    s = PhaseSchedule(tick_s=0.1, period_s=10.0, bandwidth_period_s=0.2)
    due = {k: s.phases(k) for k in range(1, 1001)}
    assert [k for k, p in due.items() if STEP in p] == list(range(100, 1001, 100))
    assert [k for k, p in due.items() if BANDWIDTH in p] == list(range(2, 1001, 2))
    assert all(p[0] == POLL for p in due.values())
    assert due[100] == [POLL, BANDWIDTH, STEP]  # the order every world runs them in


def test_a_late_loop_runs_each_missed_phase_once() -> None:
    wall = FakeWall()
    stop = SleepOnFake(wall)
    env = RealtimeEnvironment(stop=stop, clock=wall)
    s = PhaseSchedule(tick_s=1.0, period_s=5.0, bandwidth_period_s=None)
    turns = s.turns(env, until=20.0, at_start=True)
    assert next(turns) == (0.0, [POLL, STEP])
    assert next(turns) == (1.0, [POLL])
    wall.t += 12.5  # a phase stalled for 12.5 s: ticks 2..13 have passed
    t, phases = next(turns)
    assert t == 13.0 and phases == [POLL, STEP]  # periods at 5 and 10 missed: one step
    assert next(turns) == (14.0, [POLL])
    assert [t for t, _ in turns][-1] == 20.0


def test_simulated_turns_never_skip() -> None:
    s = PhaseSchedule(tick_s=0.5, period_s=1.0)
    turns = list(s.turns(Environment(), until=3.0))
    assert [t for t, _ in turns] == [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    assert [STEP in p for _, p in turns] == [False, True] * 3
