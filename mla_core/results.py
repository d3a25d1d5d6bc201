"""The base of every result the core returns: a frozen dataclass with `to_dict()`.

Results also read like the dicts they replaced (`result["kv_cache_bytes"]`, `result.keys()`,
`{**result}`), so a page can pick a field by name; the JSON the command line prints is
`to_dict()`, with nested results and tuples turned into dicts and lists.
"""
from __future__ import annotations

from dataclasses import fields, is_dataclass


def _plain(value):
    if isinstance(value, Result):
        return value.to_dict()
    if is_dataclass(value) and not isinstance(value, type):
        return {f.name: _plain(getattr(value, f.name)) for f in fields(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


class Result:
    """Mixin for result dataclasses: `to_dict()` and read-only mapping access by field name."""

    def to_dict(self) -> dict:
        """Every field, nested results and tuples as plain dicts and lists (JSON-able)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    def keys(self):
        return [f.name for f in fields(self)]

    def __getitem__(self, key: str):
        if not isinstance(key, str) or key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self):
        return iter(self.keys())

    def __len__(self) -> int:
        return len(fields(self))

    def __contains__(self, key) -> bool:
        return isinstance(key, str) and key in self.__dataclass_fields__

    def get(self, key: str, default=None):
        return getattr(self, key) if key in self else default
