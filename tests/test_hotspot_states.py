"""A hot host left as it is is one state with a start and an end in the events (issue 36),
not an event per round."""

from __future__ import annotations

from sova.hotspot_events import HotspotStates

NO_SPOT = "hot: net 5/5 over 0.75, forecast 0.9{}; no cold spot for top (h2: would reach net {})"


def stuck(i: int) -> tuple[str, bool, str | None, str | None, str]:
    # the numbers in the reason change every round; the state does not
    return ("h1", False, "top", None, NO_SPOT.format(i, 0.8 + i / 100))


def test_a_repeated_refusal_is_one_state() -> None:
    states = HotspotStates("sova")
    written = []
    for r in range(100):
        keep, ended = states.round(10.0 * r, [stuck(r)])
        written.append((len(keep), len(ended)))
    # the first round starts the state (its hotspot event), the other 99 write nothing
    assert written[0] == (1, 0) and set(written[1:]) == {(0, 0)}
    # not hot any more: one end, with the state's span and rounds
    keep, ended = states.round(1000.0, [])
    (end,) = ended
    assert (end.event, end.src_host, end.vm) == ("hotspot_end", "h1", "top")
    assert end.detail == "no cold spot from 0 s to 1000 s (100 rounds); then: not hot"
    assert states.open == {}


def test_another_cause_or_a_move_ends_the_state() -> None:
    states = HotspotStates("sova")
    states.round(0.0, [stuck(0)])
    # held by a limit: a new state (its own event), the old one ended
    held = ("h1", False, "top", None, "hot: ...; held: 4 migration(s) in flight")
    keep, ended = states.round(10.0, [held])
    assert keep == [0] and [e.detail.split(" from")[0] for e in ended] == ["no cold spot"]
    # a move: written, and the held state ends
    moved = ("h1", True, "top", "h3", "hot: ...; move top to h3")
    keep, ended = states.round(20.0, [moved])
    assert keep == [0] and ended[0].detail.endswith("then: move top to h3")
    assert states.open == {}


def test_states_open_at_the_end_are_closed() -> None:
    states = HotspotStates("sova")
    states.round(0.0, [stuck(0), ("h2", False, None, None, "hot: ...; no VM to move")])
    ends = states.close(60.0)
    assert [(e.src_host, e.detail) for e in ends] == [
        ("h1", "no cold spot from 0 s to 60 s (1 rounds); open at the end of the run"),
        ("h2", "no VM from 0 s to 60 s (1 rounds); open at the end of the run"),
    ]


def test_a_refusal_for_whichever_vm_is_one_state() -> None:
    """A hot host whose VMs carry equal loads offers a different mover from round to round
    (the jitter decides which is top); refused for each, the host is still one state. It
    was an event per flip: on the benchmark's hot fleet (``simulate_scale.py --hot 0.17``,
    100 x 3, 600 s) 214 ``hotspot`` events for 17 hot hosts."""
    states = HotspotStates("sova")
    movers = ["a", "b", "a", "c", "b"] * 4
    written = [
        states.round(10.0 * r, [("h1", False, vm, None, NO_SPOT.format(r, 0.8))])
        for r, vm in enumerate(movers)
    ]
    assert [len(keep) for keep, _ in written] == [1] + [0] * 19
    assert all(not ended for _, ended in written)
    (end,) = states.close(200.0)
    # the state keeps the VM it started with and names the others it was refused for
    assert end.vm == "a"
    assert end.detail == (
        "no cold spot from 0 s to 200 s (20 rounds; also refused for b, c); "
        "open at the end of the run"
    )
