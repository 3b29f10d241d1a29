"""A bounded memo that keeps the values of the keys asked most recently (`Recent`).

The simulator and the cost model keep derived values per key (a context per model and cluster, a group's memory
lines, every op's times at one row count) that the search asks for again and again, but not without bound: a long
search meets more keys than it should hold. `Recent` holds at most `size` of them and drops the one asked least
recently when a new one comes in.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, Hashable, TypeVar

V = TypeVar("V")


class Recent(Generic[V]):
    """key -> value for at most `size` keys (>= 1); `get` and `put` both count as asking for a key."""

    def __init__(self, size: int):
        if size < 1:
            raise ValueError(f"Recent: size must be at least 1, got {size}")
        self.size = size
        self._values: OrderedDict[Hashable, V] = OrderedDict()

    def get(self, key: Hashable) -> V | None:
        """The value kept for `key` (now the most recent), or None."""
        value = self._values.get(key)
        if value is not None:
            self._values.move_to_end(key)
        return value

    def put(self, key: Hashable, value: V) -> V:
        """Keep `value` for `key` as the most recent, dropping the least recent beyond `size`; returns `value`."""
        self._values[key] = value
        self._values.move_to_end(key)
        while len(self._values) > self.size:
            self._values.popitem(last=False)
        return value

    def values(self) -> list[V]:
        """The values kept, least recent first."""
        return list(self._values.values())

    def clear(self) -> None:
        self._values.clear()

    def __len__(self) -> int:
        return len(self._values)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._values
