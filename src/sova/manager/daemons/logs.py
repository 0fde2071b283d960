"""One log format for the daemons and the libraries they host (uvicorn, httpx, Alembic).

Three formats:

- ``journal`` (chosen automatically when stderr is the journal: ``$JOURNAL_STREAM`` names
  its device and inode): each line starts with its syslog priority as ``<N>``, which journald
  turns into the entry's PRIORITY (``journalctl -p warning`` works), and carries no
  timestamp of its own (journald stamps every entry).
- ``json``: one object per line for log shippers that do not read the journal (Loki,
  Elasticsearch): ``time`` (ISO 8601 UTC, milliseconds), ``ts`` (the same as epoch seconds,
  for scripts that subtract times), ``level``, ``logger``, ``msg``, ``exc``, and the
  subjects of the line as fields of their own — ``host``, ``vm``, ``plan``, ``decision``,
  ``directive``, ``lease``, ``epoch`` — where the code logging it passes them
  (:func:`fields`), so a fleet's logs are searched by ``host="hv007"``, not by a regular
  expression over free text (issue 38).
- ``text``: timestamped lines for a terminal.

uvicorn is started with ``log_config=None`` and its loggers propagate to the root handler
installed here, so its lines look like Sova's. Alembic and httpx log each migration step and
request at INFO; they are raised to WARNING unless the daemon runs at DEBUG.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

# syslog(3) priorities
_PRIORITY = {
    logging.CRITICAL: 2,
    logging.ERROR: 3,
    logging.WARNING: 4,
    logging.INFO: 6,
    logging.DEBUG: 7,
}
FORMATS = ("auto", "journal", "json", "text")
_CHATTY = ("alembic", "httpx", "httpcore", "uvicorn.access")


def _priority(levelno: int) -> int:
    for level in sorted(_PRIORITY, reverse=True):
        if levelno >= level:
            return _PRIORITY[level]
    return 7


class JournalFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__("%(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        prefix = f"<{_priority(record.levelno)}>"
        # Each physical line becomes its own journal entry; keep the priority on all of them.
        return "\n".join(prefix + line for line in super().format(record).splitlines())


# The subjects a log line may name as fields of its own (JSON format).
FIELDS = ("host", "vm", "plan", "decision", "directive", "lease", "epoch")


def fields(**subjects: Any) -> dict[str, Any]:
    """``extra=`` for a log call: its subjects (None left out), for the JSON format's
    fields. Kept under one record attribute so no name can clash with LogRecord's own."""
    unknown = set(subjects) - set(FIELDS)
    if unknown:
        raise ValueError(f"log fields: {sorted(unknown)} not among {FIELDS}")
    return {"sova_fields": {k: v for k, v in subjects.items() if v is not None}}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC)
        entry: dict[str, Any] = {
            "time": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(getattr(record, "sova_fields", {}))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def stderr_is_journal(stream: TextIO | None = None) -> bool:
    """True if ``stream`` (default stderr) is the journal stream systemd connected us to."""
    want = os.environ.get("JOURNAL_STREAM", "")
    if ":" not in want:
        return False
    try:
        st = os.fstat((stream or sys.stderr).fileno())
    except (OSError, ValueError):
        return False
    return want == f"{st.st_dev}:{st.st_ino}"


def formatter_for(fmt: str) -> logging.Formatter:
    if fmt == "auto":
        fmt = "journal" if stderr_is_journal() else "text"
    if fmt == "journal":
        return JournalFormatter()
    if fmt == "json":
        return JsonFormatter()
    if fmt == "text":
        return logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    raise ValueError(f"log_format: {fmt!r} is not one of {', '.join(FORMATS)}")


def configure(level: str, fmt: str | None = None) -> None:
    """Route every logger (Sova's, uvicorn's, the libraries') through one stderr handler.

    ``fmt`` defaults to ``$SOVA_LOG_FORMAT`` or ``auto``.
    """
    fmt = fmt or os.environ.get("SOVA_LOG_FORMAT", "auto")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(formatter_for(fmt))
    handler.set_name("sova")
    root = logging.getLogger()
    for old in list(root.handlers):
        if old.get_name() == "sova":  # ours from an earlier call; others (pytest's) stay
            root.removeHandler(old)
    root.addHandler(handler)
    numeric = logging.getLevelName(level.upper())
    root.setLevel(numeric)
    for name in ("uvicorn", "uvicorn.error"):
        lg = logging.getLogger(name)
        lg.handlers.clear()
        lg.propagate = True
    quiet = logging.WARNING if numeric > logging.DEBUG else logging.DEBUG
    for name in _CHATTY:
        logging.getLogger(name).setLevel(max(quiet, numeric))


def dump_stacks_on_signal() -> bool:
    """A daemon that hangs or crashes says where: a fatal signal (SIGSEGV, SIGABRT, ...)
    prints every thread's Python stack to stderr (the journal), and ``kill -USR1 PID``
    prints them on demand without stopping the process. Returns whether SIGUSR1 was
    registered (not on platforms without it). The standard library's faulthandler does
    both; it is process-wide, so calling this twice is harmless."""
    import faulthandler
    import io
    import signal

    usr1 = getattr(signal, "SIGUSR1", None)
    try:
        faulthandler.enable(file=sys.stderr, all_threads=True)
        if usr1 is None:  # pragma: no cover - Windows
            return False
        faulthandler.register(usr1, file=sys.stderr, all_threads=True, chain=False)
    except (ValueError, AttributeError, io.UnsupportedOperation):
        return False  # a stderr without a descriptor (an embedding host's): nothing to dump to
    return True
