"""``sova_to_toml``: the role's settings (a mapping of any depth) as a TOML document.

Written through tomli-w, a TOML library, not a Jinja template: a template that renders two
levels dropped ``[placement.host_groups]`` and wrote ``rules = [{...}]``, which is not TOML,
and lost nested ``controller.*`` keys without a word (issue 38). tomli-w writes nested tables,
arrays of tables and quoted keys as TOML says, and refuses what TOML cannot hold (None).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def _plain(value: Any, where: str) -> Any:
    """Ansible's str/dict subclasses as the built-in types tomli-w writes; None refused
    with the key's dotted path (TOML has no null: leave the key out instead)."""
    if value is None:
        raise ValueError(
            f"sova_to_toml: {where or 'the settings'} is null; TOML has no null, leave the key out"
        )
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{where}.{k}" if where else str(k)) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    return value


def sova_to_toml(settings: Mapping[str, Any]) -> str:
    try:
        import tomli_w
    except ImportError as exc:
        raise ImportError(
            "the sova role writes TOML with tomli-w: pip install -r deploy/ansible/requirements.txt "
            "into the environment that runs ansible-playbook"
        ) from exc
    return tomli_w.dumps(_plain(settings, ""))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"sova_to_toml": sova_to_toml}
