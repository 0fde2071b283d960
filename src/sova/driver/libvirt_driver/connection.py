"""Opening a libvirt connection: the optional import, the event loop, permanent errors."""

from __future__ import annotations

import threading
from typing import Any

from sova.driver.base import DriverError
from sova.install import install_hint

try:
    import libvirt
except ImportError:  # pragma: no cover - exercised only where libvirt-python is absent
    libvirt = None


def require_libvirt() -> Any:
    if libvirt is None:
        raise DriverError(
            f"libvirt-python is not installed: {install_hint('agent')} "
            "(builds against libvirt-dev; or use the distribution's python3-libvirt)"
        )
    return libvirt


_loop_lock = threading.Lock()
_loop_started = False


def ensure_event_loop() -> None:
    """Start libvirt's default event loop once per process (before any connection opens).

    Without it libvirt delivers no domain events at all, and hot-plug could only be
    confirmed by polling the XML.
    """
    global _loop_started
    lv = require_libvirt()
    with _loop_lock:
        if _loop_started:
            return
        lv.virEventRegisterDefaultImpl()

        def run() -> None:
            while True:
                lv.virEventRunDefaultImpl()

        threading.Thread(target=run, name="libvirt-events", daemon=True).start()
        _loop_started = True


def open_connection(uri: str, read_only: bool) -> Any:
    lv = require_libvirt()
    # libvirt prints every error to stderr by default; we report them ourselves.
    lv.registerErrorHandler(lambda _ctx, _err: None, None)
    ensure_event_loop()
    try:
        return lv.openReadOnly(uri) if read_only else lv.open(uri)
    except lv.libvirtError as e:
        raise DriverError(f"cannot connect to {uri}: {e}") from e


def is_permanent(e: Any) -> bool:
    """Errors a retry cannot fix: the request itself is wrong or unsupported here."""
    lv = require_libvirt()
    return e.get_error_code() in (
        lv.VIR_ERR_NO_SUPPORT,
        lv.VIR_ERR_CONFIG_UNSUPPORTED,
        lv.VIR_ERR_XML_ERROR,
        lv.VIR_ERR_XML_DETAIL,
        lv.VIR_ERR_INVALID_ARG,
        lv.VIR_ERR_NO_DOMAIN,
    )
