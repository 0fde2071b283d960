"""The demo's world process: a simulated cluster served to agent processes over HTTP.

Why a separate process: ``sova demo`` must exercise the real daemons — agents that crash
and restart, a manager that goes away, reports over HTTP — so the simulated hosts live
here and each agent drives "its" host through a :class:`~sova.driver.remote.RemoteDriver`,
exactly as it would drive libvirt.

Time is simulated and advanced here, faster than real time, in **lockstep** with the
agents: after each tick an agent does what its loop does at that instant (poll, bandwidth
step, control step and report) and then calls ``/sync``; the world advances the next tick
only when every live agent has synced. That keeps a demo run deterministic — the same
scenario and seed give the same events as an in-process ``sova simulate`` — however the
processes are scheduled. An agent that stops syncing (killed, hung) is waited for
``agent_timeout_s`` of real time and then left behind: its host keeps running, as a
hypervisor does when its agent dies, and the agent rejoins when it comes back.

The world also checks the cluster's invariants after every tick (a VF index held by two
VMs, more holders than VFs, a VM on no host or two) so fault tests can assert on them.

Why one module over 500 lines: the lockstep service, its HTTP routes, the records it
merges and the agents' side of the demo-only calls (:class:`WorldHost`: ``/sync``,
``/agent-config``, ``/records``) are one protocol; split, each half would be unreadable
without the other. The Driver protocol itself is :mod:`sova.driver.remote`'s, which knows
nothing of the demo.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from sova.agent.config import CONFIG_PROTOCOL, ControllerConfig, settings_for_protocol
from sova.agent.schedule import PhaseSchedule
from sova.driver.base import DriverError
from sova.driver.remote import RemoteDriver, decode_action, encode
from sova.record import outcome_event, row_dict, step_rows
from sova.scenario import PolicySpec, Scenario, load_scenario

if TYPE_CHECKING:
    from sova.sim.world import World

log = logging.getLogger("sova.world")


class WorldHost(RemoteDriver):
    """An agent's host in the demo's world: the remote driver plus the calls only the demo
    makes (its lockstep turns, the scenario's controller, the agent's records)."""

    def sync(self, at: float, phase: int, wait_s: float = 10.0) -> tuple[float, int, bool]:
        """Tell the world this agent finished ``phase`` at time ``at``; wait for its next turn.

        Returns ``(time, phase, done)``: the turn to act on (phase -1 = none yet, call
        again) and whether the run has ended.
        """
        d = self._call(
            "POST",
            "/sync",
            json={"at": at, "phase": phase, "wait_s": wait_s},
            timeout=wait_s + 5.0,
        )
        return float(d["now"]), int(d["phase"]), bool(d["done"])

    def agent_config(self) -> ControllerConfig:
        """The scenario's controller configuration for this world's policy."""
        # The protocol says which settings this agent knows (SETTINGS_SINCE); an agent of
        # the unversioned release asks without it and is served only what it knows.
        cfg = self._call("GET", f"/agent-config?protocol={CONFIG_PROTOCOL}")
        return ControllerConfig.model_validate(cfg)

    def records(self, timeline: list[dict[str, Any]], events: list[dict[str, Any]]) -> None:
        """Hand the world the agent's step records and outcome events (for output files)."""
        if timeline or events:
            self._call("POST", "/records", json={"timeline": timeline, "events": events})


def world_recorder(host: WorldHost) -> Callable[[str, Any], None]:
    """Send step records and outcome events to the world, as :mod:`sova.record` words them
    (the world adds policy, host and what only it measures)."""

    def record(kind: str, payload: Any) -> None:
        if kind == "step":
            host.records([row_dict(r) for r in step_rows(payload)], [])
            return
        ev = outcome_event(payload)
        if ev is not None:
            host.records([], [row_dict(ev)])

    return record


def make_world(scn: Scenario, policy: str | None = None) -> tuple[Any, PolicySpec]:
    from sova.sim.world import World

    specs = scn.policy_specs
    spec = next((p for p in specs if p.name == policy), None) if policy else specs[0]
    if spec is None:
        raise ValueError(f"policy {policy!r} is not in the scenario ({[p.name for p in specs]})")
    return World(scn, spec, with_agents=False), spec


class WorldService:
    def __init__(
        self,
        world: Any,
        *,
        tick_s: float,
        until_s: float,
        period_s: float = 10.0,
        bandwidth_period_s: float | None = None,
        expect: set[str] | None = None,
        speed: float | None = None,
        agent_timeout_s: float = 5.0,
        start_timeout_s: float = 30.0,
        policy: str = "",
    ) -> None:
        self.world = world
        self.tick_s = tick_s
        self.until_s = until_s
        self.expect = set(expect) if expect is not None else set(world.hosts)
        self.speed = speed
        self.agent_timeout_s = agent_timeout_s
        self.start_timeout_s = start_timeout_s
        self.policy = policy
        self.order: list[str] = list(world.hosts)
        self.schedule = PhaseSchedule(tick_s, period_s, bandwidth_period_s)
        self.turn: tuple[float, int, str] | None = None  # (time, phase, host) now acting
        self.acked: dict[str, tuple[float, int]] = {}
        self.last_seen: dict[str, float] = {}
        self.done = False
        self.paused = False
        # A breakpoint for fault tests: pause by itself at the end of the first tick in which
        # a VM is migrating, so a test can act mid-migration without racing the world.
        self.pause_at_migration = False
        self.violations: list[str] = []
        self.ticks = 0
        self.cond = asyncio.Condition()
        self.started = asyncio.Event()

    # ------------------------------------------------------------------ lockstep

    def _live(self, host: str) -> bool:
        seen = self.last_seen.get(host)
        return seen is not None and time.monotonic() - seen < self.agent_timeout_s

    async def _wait(self, pred: Any, timeout: float) -> bool:
        async with self.cond:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.cond.wait_for(pred), timeout)
        return bool(pred())

    async def run(self) -> None:
        await self._wait(lambda: self.expect <= set(self.last_seen), self.start_timeout_s)
        missing = self.expect - set(self.last_seen)
        if missing:
            log.warning("starting without agents for %s", ", ".join(sorted(missing)))
        self.started.set()
        k = 0
        while self.world.now < self.until_s - 1e-9:
            started = time.monotonic()
            await self._wait(lambda: not self.paused, 3600.0)
            self.world.advance()
            k += 1
            self.ticks = k
            self._check()
            for phase in self.schedule.phases(k):
                for h in self.order:
                    if h not in self.expect or not self._live(h):
                        continue
                    turn = (self.world.now, phase)
                    self.turn = (turn[0], phase, h)
                    async with self.cond:
                        self.cond.notify_all()
                    # Wait while the agent is alive; a dead one is skipped from now on.
                    while not await self._wait(
                        lambda h=h, turn=turn: self.acked.get(h, (-1.0, 0)) >= turn,
                        0.05,
                    ):
                        if not self._live(h):
                            log.warning("agent of %s stopped syncing; its host runs on", h)
                            break
            self.turn = None
            if self.pause_at_migration and self._any_migrating():
                self.pause_at_migration = False
                self.paused = True
                log.info("paused at t=%g: a VM is migrating (breakpoint)", self.world.now)
            if self.speed:
                await asyncio.sleep(
                    max(0.0, self.tick_s / self.speed - (time.monotonic() - started))
                )
        self.done = True
        async with self.cond:
            self.cond.notify_all()

    async def sync(
        self, host: str, at: float, phase: int, wait_s: float = 10.0
    ) -> tuple[float, int, bool]:
        """``host`` finished ``phase`` at time ``at``; wait for its next turn and return it."""
        self.last_seen[host] = time.monotonic()
        done_turn = (at, phase)
        if done_turn > self.acked.get(host, (-1.0, 0)):
            self.acked[host] = done_turn
        async with self.cond:
            self.cond.notify_all()

        def my_turn() -> bool:
            t = self.turn
            return self.done or (t is not None and t[2] == host and (t[0], t[1]) > done_turn)

        # Keep-alive: a long wait (other agents working) must not look like a dead agent.
        deadline = time.monotonic() + wait_s
        while not await self._wait(my_turn, 0.25) and time.monotonic() < deadline:
            self.last_seen[host] = time.monotonic()
        self.last_seen[host] = time.monotonic()
        t = self.turn
        if t is not None and t[2] == host and (t[0], t[1]) > done_turn:
            return t[0], t[1], False
        return self.world.now, -1, self.done

    def _any_migrating(self) -> bool:
        return any(
            s.migrating
            for h in self.world.hosts
            for s in self.world.driver(h).inventory().vms.values()
        )

    # ------------------------------------------------------------------ invariants

    def placement(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for h in self.world.hosts:
            for vm in self.world.driver(h).inventory().vms:
                out.setdefault(vm, []).append(h)
        return out

    def _check(self) -> None:
        t = self.world.now
        for h in self.world.hosts:
            inv = self.world.driver(h).inventory()
            idx = [s.vf_index for s in inv.vms.values() if s.vf_index is not None]
            if len(idx) != len(set(idx)):
                self.violations.append(f"t={t:g} {h}: VF index held twice {sorted(idx)}")
            if len(inv.vf_holders) > inv.host.nic.vf_pool:
                self.violations.append(
                    f"t={t:g} {h}: {len(inv.vf_holders)} holders > pool {inv.host.nic.vf_pool}"
                )
        for vm, hosts in self.placement().items():
            if len(hosts) != 1:
                self.violations.append(f"t={t:g} {vm} on {hosts}")
        del self.violations[1000:]

    def view(self) -> dict[str, Any]:
        run = getattr(self.world, "run", None)
        events: list[Any] = list(run.events) if run is not None else []
        hosts = {}
        for h in self.world.hosts:
            inv = self.world.driver(h).inventory()
            hosts[h] = {
                "vf_pool": inv.host.nic.vf_pool,
                "vms": {
                    n: {
                        "nic": s.nic.value,
                        "vf_index": s.vf_index,
                        "vf_max_bps": s.vf_max_bps,
                        "migrating": s.migrating,
                    }
                    for n, s in sorted(inv.vms.items())
                },
            }
        return {
            **live_figures(self.world),
            "now": self.world.now,
            "until": self.until_s,
            "done": self.done,
            "ticks": self.ticks,
            "turn": list(self.turn) if self.turn else None,
            "paused": self.paused,
            "live_agents": sorted(h for h in self.expect if self._live(h)),
            "hosts": hosts,
            "events": len(events),
            "recent_events": [
                {
                    "time_s": e.time_s,
                    "event": e.event,
                    "vm": e.vm,
                    "src": e.src_host,
                    "dst": e.dst_host,
                }
                for e in events[-20:]
            ],
            "violations": self.violations[:50],
            "violation_count": len(self.violations),
        }


def live_figures(world: Any) -> dict[str, Any]:
    """What the demo's live view shows beside the placement: each host's link use and each
    guaranteed VM's rate and how often its guarantee held so far, from the world's own
    per-tick statistics (a stub world without them shows none)."""
    from sova.sim.output import live_figures as figures

    run = getattr(world, "run", None)
    eng = getattr(world, "engine", None)
    if run is None or eng is None or not hasattr(run, "stats"):
        return {}
    return figures(run, eng, getattr(world, "scn", None))


# --------------------------------------------------------------------------- HTTP


def _host(request: Request, svc: WorldService) -> str:
    host = request.path_params["host"]
    if host not in svc.world.hosts:
        raise KeyError(host)
    return str(host)


# A route table (short handlers and the list naming their paths): long by nature, capped in
# tests/test_function_sizes.py rather than split.
def create_world_app(
    svc: WorldService, out_dir: Path | None = None, scn: Scenario | None = None
) -> Starlette:
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(svc.run())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def err(status: int, msg: str) -> JSONResponse:
        return JSONResponse({"detail": msg}, status_code=status)

    async def on_host(request: Request, fn: Any) -> JSONResponse:
        try:
            host = _host(request, svc)
        except KeyError:
            return err(404, f"no host {request.path_params['host']!r} in this world")
        try:
            return JSONResponse(await fn(host))
        except DriverError as exc:
            return err(409, str(exc))
        except (ValueError, TypeError, KeyError) as exc:
            return err(422, f"{type(exc).__name__}: {exc}")

    async def world_info(request: Request) -> JSONResponse:
        return JSONResponse(
            {
                "now": svc.world.now,
                "hosts": svc.world.hosts,
                "tick_s": svc.tick_s,
                "until_s": svc.until_s,
                "done": svc.done,
                "policy": svc.policy,
            }
        )

    async def view(request: Request) -> JSONResponse:
        return JSONResponse(svc.view())

    async def now(request: Request) -> JSONResponse:
        return await on_host(request, lambda h: _aw({"now": svc.world.now}))

    async def caps(request: Request) -> JSONResponse:
        return await on_host(request, lambda h: _aw(encode(svc.world.driver(h).capabilities())))

    async def inventory(request: Request) -> JSONResponse:
        return await on_host(request, lambda h: _aw(encode(svc.world.driver(h).inventory())))

    async def sample(request: Request) -> JSONResponse:
        return await on_host(request, lambda h: _aw(encode(svc.world.driver(h).sample())))

    async def submit(request: Request) -> JSONResponse:
        async def go(h: str) -> Any:
            action = decode_action(await request.json())
            return {"op_id": svc.world.driver(h).submit(action)}

        return await on_host(request, go)

    async def poll(request: Request) -> JSONResponse:
        op_id = request.path_params["op_id"]

        async def go(h: str) -> Any:
            st = svc.world.driver(h).poll(op_id)
            return {"op_id": st.op_id, "state": st.state.value, "detail": st.detail}

        return await on_host(request, go)

    async def sync(request: Request) -> JSONResponse:
        async def go(h: str) -> Any:
            body = await request.json()
            at = float(body["at"])
            if not math.isfinite(at):
                raise ValueError("at must be finite")
            phase = int(body.get("phase", 0))
            t, next_phase, done = await svc.sync(h, at, phase, float(body.get("wait_s", 10.0)))
            return {"now": t, "phase": next_phase, "done": done}

        return await on_host(request, go)

    async def agent_cfg(request: Request) -> JSONResponse:
        from sova.sim.world import agent_config

        if scn is None:
            return err(409, "this world was started without its scenario")
        spec = svc.world.policy
        try:
            protocol = int(request.query_params.get("protocol", "0"))
        except ValueError:
            return err(400, f"protocol: not an integer: {request.query_params['protocol']!r}")
        # Only what differs from the defaults, and only the settings the agent's protocol
        # knows: an agent of the previous release (the rolling-upgrade test) then meets no
        # setting newer than itself.
        full = agent_config(scn, spec).model_dump(mode="json", exclude_defaults=True)
        cfg, dropped = settings_for_protocol(full, protocol)
        if dropped:
            log.info("agent config for protocol %d leaves out %s", protocol, ", ".join(dropped))
        return await on_host(request, lambda h: _aw(cfg))

    async def records(request: Request) -> JSONResponse:
        async def go(h: str) -> Any:
            body = await request.json()
            add_records(svc, h, body.get("timeline", []), body.get("events", []))
            return {"ok": True}

        return await on_host(request, go)

    async def pause(request: Request) -> JSONResponse:
        body = await request.json()
        at = body.get("at")
        if at is not None:
            if at != "migration":
                return err(422, f"at = {at!r}: the only breakpoint is 'migration'")
            svc.pause_at_migration = True
        else:
            svc.paused = bool(body.get("paused", True))
        async with svc.cond:
            svc.cond.notify_all()
        return JSONResponse(
            {"paused": svc.paused, "at": "migration" if svc.pause_at_migration else None}
        )

    async def finish(request: Request) -> JSONResponse:
        """Merge the manager's decisions and write the run's output files."""
        body = await request.json()
        if out_dir is None or scn is None:
            return err(409, "this world was started without an output directory")
        path = write_run(svc, scn, out_dir, body.get("decisions", []), body.get("baseline"))
        return JSONResponse({"out": str(path)})

    routes = [
        Route("/v1/world", world_info),
        Route("/v1/world/view", view),
        Route("/v1/world/pause", pause, methods=["POST"]),
        Route("/v1/world/finish", finish, methods=["POST"]),
        Route("/v1/world/hosts/{host}/now", now),
        Route("/v1/world/hosts/{host}/capabilities", caps),
        Route("/v1/world/hosts/{host}/inventory", inventory),
        Route("/v1/world/hosts/{host}/sample", sample),
        Route("/v1/world/hosts/{host}/ops", submit, methods=["POST"]),
        Route("/v1/world/hosts/{host}/ops/{op_id}", poll),
        Route("/v1/world/hosts/{host}/sync", sync, methods=["POST"]),
        Route("/v1/world/hosts/{host}/records", records, methods=["POST"]),
        Route("/v1/world/hosts/{host}/agent-config", agent_cfg),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


async def _aw(value: Any) -> Any:
    return value


# --------------------------------------------------------------------------- records


def add_records(
    svc: WorldService, host: str, timeline: list[dict[str, Any]], events: list[dict[str, Any]]
) -> None:
    """Agents' step records and outcome events, completed with what only the world knows."""
    from sova.record import event_from_dict, timeline_from_dict

    world = svc.world
    run = world.run
    for r in timeline:
        run.timeline.append(world.complete(timeline_from_dict(r), host))
    for e in events:
        ev = event_from_dict(e)
        run.events.append(dataclasses.replace(ev, policy=svc.policy, src_host=host))


def hotspot_events(decisions: list[dict[str, Any]], policy: str, world: World) -> list[Any]:
    """The manager's decision log as events, worded and condensed as ``sova simulate``
    writes them: a hot host left as it is is one state
    (:class:`sova.hotspot_events.HotspotStates`), judged at every control round of
    ``world``'s schedule, the rounds that decided nothing included (they end the states of
    hosts no longer hot)."""
    from sova.hotspot_events import HotspotStates

    by_time: dict[float, list[dict[str, Any]]] = {}
    for d in decisions:
        by_time.setdefault(round(float(d["time_s"]), 6), []).append(d)
    every = world.schedule.period_ticks
    rounds = set(by_time) | {round(k * world.tick_s, 6) for k in range(every, world.k + 1, every)}
    states = HotspotStates(policy)
    out: list[Any] = []
    for t in sorted(rounds):
        new = by_time.get(t, [])
        if new or states.open:
            out.extend(states.events(t, new))
    out.extend(states.close(world.k * world.tick_s))
    return out


def write_run(
    svc: WorldService,
    scn: Scenario,
    out_dir: Path,
    decisions: list[dict[str, Any]],
    baseline: str | None = None,
) -> Path:
    """The run's files; with ``baseline`` (a compared policy's name), that policy is also
    simulated here, same scenario and seed, so the report can say what the daemons' policy
    bought over it."""
    from sova.sim.output import write_outputs
    from sova.sim.runner import run_policy

    run = svc.world.run
    run.events.extend(hotspot_events(decisions, svc.policy, svc.world))
    # Agents report in parallel; the in-process run appends in time order, host by host.
    order = {h: i for i, h in enumerate(svc.world.hosts)}
    run.events.sort(key=lambda e: (e.time_s, order.get(e.src_host, 0)))
    run.timeline.sort(key=lambda r: (r.time_s, order.get(r.host, 0), r.vm))
    run.decisions = [
        {k: d[k] for k in ("time_s", "host", "flag", "target", "vm", "reason")} for d in decisions
    ]
    run.engine = svc.world.engine
    runs = [run]
    if baseline is not None and baseline != svc.policy:
        runs.insert(0, run_policy(scn, baseline))
    write_outputs(out_dir, [(scn, runs)])
    (out_dir / "world-check.json").write_text(
        json.dumps({"violations": svc.violations, "ticks": svc.ticks}, indent=2) + "\n"
    )
    return out_dir


def serve(
    scn_path: Path,
    host: str,
    port: int,
    *,
    policy: str | None = None,
    speed: float | None = None,
    agent_timeout_s: float = 5.0,
    start_timeout_s: float = 30.0,
    until_s: float | None = None,
    out_dir: Path | None = None,
    expect: set[str] | None = None,
) -> None:
    import uvicorn

    scn = load_scenario(scn_path)
    world, spec = make_world(scn, policy)
    c = scn.controller
    svc = WorldService(
        world,
        tick_s=scn.tick,
        period_s=c.period,
        bandwidth_period_s=c.bandwidth_period if spec.bandwidth != "none" else None,
        until_s=until_s if until_s is not None else scn.duration,
        expect=expect,
        speed=speed,
        agent_timeout_s=agent_timeout_s,
        start_timeout_s=start_timeout_s,
        policy=spec.name,
    )
    app = create_world_app(svc, out_dir, scn)
    uvicorn.run(
        app,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=3,
    )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description="Serve a simulated cluster to agent processes.")
    ap.add_argument("scenario", type=Path)
    ap.add_argument("--listen", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8710)
    ap.add_argument("--policy", default=None)
    ap.add_argument("--speed", type=float, default=None, help="max simulated s per real s")
    ap.add_argument("--agent-timeout", type=float, default=5.0)
    ap.add_argument("--start-timeout", type=float, default=30.0)
    ap.add_argument("--until", type=float, default=None)
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--expect", default=None, help="comma-separated hosts to wait for")
    args = ap.parse_args(argv)
    logging.basicConfig(level="INFO", format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    serve(
        args.scenario,
        args.listen,
        args.port,
        policy=args.policy,
        speed=args.speed,
        agent_timeout_s=args.agent_timeout,
        start_timeout_s=args.start_timeout,
        until_s=args.until,
        out_dir=args.out,
        expect=set(args.expect.split(",")) if args.expect else None,
    )


if __name__ == "__main__":
    main()
