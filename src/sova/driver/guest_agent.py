"""QEMU guest agent: run a command in the guest and really find out whether it worked.

DAQS's published code applies in-guest ``tc`` through ``guest-exec`` and never calls
``guest-exec-status`` (docs/design.md#daqs): a typo, a missing ``tc`` binary or a refused qdisc fails
silently and the controller believes a limit is in force. Here every command is followed by
``guest-exec-status`` until it exits (bounded by a deadline), and a non-zero exit code, a
signal or a timeout is an error carrying the guest's stderr.

The transport is a plain callable ``(domain, json_command, timeout_s) -> json_reply`` so the
tests can script a guest; by default it is ``libvirt_qemu.qemuAgentCommand``.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

AgentCall = Callable[[Any, str, int], str]


class GuestAgentError(RuntimeError):
    """The agent is absent, unresponsive or refused the command."""


class GuestCommandFailed(GuestAgentError):
    """The command ran and exited non-zero (or was killed, or did not finish in time)."""

    def __init__(self, message: str, exitcode: int | None, stderr: str = "") -> None:
        super().__init__(message)
        self.exitcode = exitcode
        self.stderr = stderr


@dataclass(frozen=True)
class ExecResult:
    exitcode: int
    stdout: str
    stderr: str


@dataclass(frozen=True)
class GuestInterface:
    name: str
    mac: str
    rx_bytes: int
    tx_bytes: int
    rx_packets: int
    tx_packets: int


def _default_call(dom: Any, cmd: str, timeout_s: int) -> str:
    import libvirt_qemu

    return str(libvirt_qemu.qemuAgentCommand(dom, cmd, timeout_s, 0))


class GuestAgent:
    def __init__(
        self,
        call: AgentCall | None = None,
        *,
        command_timeout_s: int = 5,
        exec_timeout_s: float = 15.0,
        poll_interval_s: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._call = call or _default_call
        self.command_timeout_s = command_timeout_s
        self.exec_timeout_s = exec_timeout_s
        self.poll_interval_s = poll_interval_s
        self._clock = clock
        self._sleep = sleep

    def command(self, dom: Any, execute: str, arguments: dict[str, Any] | None = None) -> Any:
        req: dict[str, Any] = {"execute": execute}
        if arguments is not None:
            req["arguments"] = arguments
        try:
            raw = self._call(dom, json.dumps(req), self.command_timeout_s)
        except Exception as e:  # libvirt.libvirtError, without importing libvirt here
            raise GuestAgentError(f"guest agent {execute} failed: {e}") from e
        try:
            reply = json.loads(raw)
        except (TypeError, ValueError) as e:
            raise GuestAgentError(f"guest agent {execute}: unparsable reply {raw!r}") from e
        if "error" in reply:
            err = reply["error"]
            raise GuestAgentError(f"guest agent {execute}: {err.get('desc', err)}")
        return reply.get("return")

    def exec(self, dom: Any, path: str, args: list[str]) -> ExecResult:
        """Run ``path args…`` in the guest and wait for it; raise unless it exited 0."""
        ret = self.command(dom, "guest-exec", {"path": path, "arg": args, "capture-output": True})
        pid = int(ret["pid"])
        deadline = self._clock() + self.exec_timeout_s
        what = describe_command(path, args)
        while True:
            st = self.command(dom, "guest-exec-status", {"pid": pid})
            if st.get("exited"):
                break
            if self._clock() >= deadline:
                raise GuestCommandFailed(
                    f"guest command did not finish within {self.exec_timeout_s:g}s: {what}",
                    None,
                )
            self._sleep(self.poll_interval_s)
        out = _b64(st.get("out-data"))
        err = _b64(st.get("err-data"))
        if "signal" in st:
            raise GuestCommandFailed(
                f"guest command killed by signal {st['signal']}: {what}", None, err
            )
        code = int(st.get("exitcode", -1))
        if code != 0:
            tail = err.strip().splitlines()[-1] if err.strip() else "no stderr"
            raise GuestCommandFailed(f"guest command exited {code}: {what}: {tail}", code, err)
        return ExecResult(code, out, err)

    def interfaces(self, dom: Any) -> list[GuestInterface]:
        ret = self.command(dom, "guest-network-get-interfaces")
        out: list[GuestInterface] = []
        for i in ret or []:
            st = i.get("statistics") or {}
            out.append(
                GuestInterface(
                    name=str(i.get("name", "")),
                    mac=str(i.get("hardware-address", "")).lower(),
                    rx_bytes=int(st.get("rx-bytes", 0)),
                    tx_bytes=int(st.get("tx-bytes", 0)),
                    rx_packets=int(st.get("rx-packets", 0)),
                    tx_packets=int(st.get("tx-packets", 0)),
                )
            )
        return out


def describe_command(path: str, args: list[str], limit: int = 120) -> str:
    """A guest command as one short line for an error: ``sh -c SCRIPT NAME ARGS…`` is named
    by its NAME and ARGS (the script can be kilobytes); anything else is cut at ``limit``."""
    if len(args) >= 2 and args[0] == "-c":
        words = args[2:] or [f"{path} -c <{len(args[1])}-char script>"]
    else:
        words = [path, *args]
    line = " ".join(words).replace("\n", " ")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _b64(data: str | None) -> str:
    if not data:
        return ""
    return base64.b64decode(data).decode("utf-8", "replace")


def htb_script(mac: str, rate_bps: float | None) -> list[str]:
    """``/bin/sh -c`` arguments that shape (or unshape) the guest netdev carrying ``mac``.

    Under net_failover three netdevs share the MAC (the failover master, its virtio standby
    and the VF primary); only the master — the one without a ``master`` link of its own —
    sees all traffic, so that is the one shaped. Exit 3 when no netdev matches, so a wrong
    MAC is an error rather than a silent no-op.
    """
    find = (
        'dev=""; for d in /sys/class/net/*; do '
        '[ "$(cat "$d/address" 2>/dev/null)" = "$1" ] && [ ! -e "$d/master" ] '
        '&& dev="${d##*/}"; done; '
        '[ -n "$dev" ] || { echo "no netdev with MAC $1" >&2; exit 3; }; '
    )
    if rate_bps is None or rate_bps <= 0:
        body = 'tc qdisc del dev "$dev" root 2>/dev/null; exit 0'
        return ["-c", find + body, "sova-htb", mac.lower()]
    rate = int(rate_bps)
    # HTB refuses "qdisc replace" of an HTB root by itself ("Change operation not
    # supported"): a root already there is kept and only the class rate changes, so the
    # bandwidth controller can move a limit every period.
    body = (
        'tc qdisc show dev "$dev" root | grep -q "^qdisc htb 1: " || '
        'tc qdisc replace dev "$dev" root handle 1: htb default 10 || exit; '
        f'tc class replace dev "$dev" parent 1: classid 1:10 htb rate {rate}bit ceil {rate}bit'
    )
    return ["-c", find + body, "sova-htb", mac.lower()]
