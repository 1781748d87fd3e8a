"""Results remembered by the identity of the object they were computed from.

A kernel is a tree of frozen models and tuples, so whatever a pure function computes from one
(its well-formedness, its lowering for a target) stays true of that object. The pipeline hands
the same object to several stages (rewrite, lowering, printer, simulator), and each used to
repeat the work. A memo keeps the object itself beside the result, so an id is never matched
after its object is gone, and forgets the least recently used entries past its limit.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, Generic, TypeVar

K = TypeVar("K")
V = TypeVar("V")


_EVERY: weakref.WeakSet[ByIdentity[Any, Any]] = weakref.WeakSet()


def forget_all() -> None:
    """Empties every memo: for code that replaces a part of a computation a memo remembers (a
    test that plants a fault in a lowering), so the next call computes afresh."""
    for memo in list(_EVERY):
        memo.forget()


class ByIdentity(Generic[K, V]):
    """At most ``limit`` results, each for one object (and a tag, such as a target's name)."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._entries: OrderedDict[tuple[int, str], tuple[K, V]] = OrderedDict()
        self._lock = threading.Lock()
        _EVERY.add(self)

    def forget(self) -> None:
        """Forgets every result."""
        with self._lock:
            self._entries.clear()

    def get(self, obj: K, tag: str = "") -> V | None:
        """The result remembered for ``obj`` itself, or None."""
        key = (id(obj), tag)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or entry[0] is not obj:
                return None
            self._entries.move_to_end(key)
            return entry[1]

    def put(self, obj: K, value: V, tag: str = "") -> V:
        """Remembers ``value`` for ``obj``; returns it."""
        with self._lock:
            self._entries[(id(obj), tag)] = (obj, value)
            self._entries.move_to_end((id(obj), tag))
            while len(self._entries) > self._limit:
                self._entries.popitem(last=False)
        return value


def remembered(limit: int) -> Callable[[Callable[[K], V]], Callable[[K], V]]:
    """A one-argument pure function of a frozen object (a target's lowering), computed once
    per object for the ``limit`` objects used last; what raises is not remembered."""
    def wrap(fn: Callable[[K], V]) -> Callable[[K], V]:
        memo: ByIdentity[K, V] = ByIdentity(limit)

        @functools.wraps(fn)
        def once(obj: K) -> V:
            done = memo.get(obj)
            return done if done is not None else memo.put(obj, fn(obj))
        return once
    return wrap
