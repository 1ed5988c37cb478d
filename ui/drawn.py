"""Maps already drawn, kept as deck JSON by a digest of what they were drawn from.

Every widget, poll and ledger change reruns a page, and a page redraws its maps: the linked map's hover
layer alone (4,096 polygons a square) and its serialisation cost ~0.3 s of the one interpreter lock that
every session's script and every run share. An unchanged map (same arrays, scale, frame, view, keys) is
served from here instead. A digest of the inputs, not their identity, is the key, so an entry cannot be
served for other data; the JSON is what the same inputs would give, so sharing entries between sessions
shows nobody anything they did not draw themselves.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable

import numpy as np
import pydeck as pdk

MAX_BYTES = 192 * 2**20  # JSON kept at most (a 1024-cell linked map with hover is ~2 MB)


class DrawnDeck:
    """What ``st.pydeck_chart`` reads of a pydeck Deck: its JSON and its tooltip."""

    layers = ()
    mapbox_key = None

    def __init__(self, spec: str, tooltip):
        self.spec = spec
        self._tooltip = tooltip if isinstance(tooltip, dict) else None

    def to_json(self) -> str:
        return self.spec


_entries: OrderedDict[bytes, tuple[DrawnDeck, list]] = OrderedDict()
_size = 0
_lock = threading.Lock()


def _feed(h, obj, keep: list) -> None:
    """Feed ``obj`` to the hash ``h``; objects of no known shape go in by identity, kept alive in ``keep``
    so that their identity cannot be reused while the entry lives."""
    if obj is None or isinstance(obj, (bool, int, float, str, bytes)):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
    elif isinstance(obj, np.ndarray):
        a = np.ascontiguousarray(obj)
        h.update(f"nd:{a.dtype.str}:{a.shape};".encode())
        h.update(a.view(np.uint8).reshape(-1) if a.size else b"")
    elif isinstance(obj, np.generic):
        _feed(h, obj.item(), keep)
    elif isinstance(obj, (tuple, list)) and len(obj) <= 64:
        h.update(f"seq{len(obj)}(".encode())
        for x in obj:
            _feed(h, x, keep)
        h.update(b")")
    elif isinstance(obj, dict) and len(obj) <= 64:
        h.update(b"dict(")
        for k in sorted(obj, key=repr):
            _feed(h, k, keep)
            _feed(h, obj[k], keep)
        h.update(b")")
    elif isinstance(obj, pdk.Layer):
        h.update(obj.to_json().encode())
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type) and _small(obj):
        h.update(f"dc:{type(obj).__qualname__}(".encode())
        for f in dataclasses.fields(obj):
            _feed(h, getattr(obj, f.name), keep)
        h.update(b")")
    else:
        keep.append(obj)
        h.update(f"id:{type(obj).__qualname__}:{id(obj)};".encode())


def _small(obj) -> bool:
    """A dataclass hashed by value: no field is a long sequence (a context layer's streets go in by identity)."""
    return all(
        not (isinstance(v, (list, tuple, dict)) and len(v) > 64)
        for v in (getattr(obj, f.name) for f in dataclasses.fields(obj))
    )


def deck(parts: tuple, build: Callable[[], pdk.Deck]) -> DrawnDeck:
    """The deck ``build()`` makes from ``parts`` (everything it reads), built once while it is kept."""
    global _size
    keep: list = []
    h = hashlib.blake2b(digest_size=20)
    _feed(h, parts, keep)
    key = h.digest()
    with _lock:
        hit = _entries.get(key)
        if hit is not None:
            _entries.move_to_end(key)
            return hit[0]
    d = build()
    out = DrawnDeck(d.to_json(), getattr(d, "_tooltip", None))
    with _lock:
        if key not in _entries:
            _entries[key] = (out, keep)
            _size += len(out.spec)
            while _size > MAX_BYTES and len(_entries) > 1:
                _, (old, _kept) = _entries.popitem(last=False)
                _size -= len(old.spec)
    return out


def clear() -> None:
    global _size
    with _lock:
        _entries.clear()
        _size = 0


_derived: dict[tuple[int, str], tuple[weakref.ref, object]] = {}
_derived_lock = threading.RLock()  # re-entrant: a collection inside the lock may run ``drop``


def derived(obj, tag: str, compute: Callable[[], object]):
    """``compute()``, kept while ``obj`` (e.g. a release) lives: what a page derives from a result once."""
    key = (id(obj), tag)
    with _derived_lock:
        hit = _derived.get(key)
    if hit is not None and hit[0]() is obj:
        return hit[1]
    value = compute()

    def drop(_ref, key=key):
        with _derived_lock:
            if key in _derived and _derived[key][0] is _ref:
                del _derived[key]

    with _derived_lock:
        _derived[key] = (weakref.ref(obj, drop), value)
    return value
