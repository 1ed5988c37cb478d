"""One thread at a time in ``ast.parse``.

On CPython before 3.13 the AST constructor keeps its recursion depth in state shared by every thread of the
interpreter, so two threads building ASTs at once can fail with ``SystemError: AST constructor recursion depth
mismatch`` (a known CPython fault: python/cpython gh-106905 and its reports). The engine's background runs read ``.npy`` files whose header numpy
parses with ``ast.literal_eval`` while other threads do the same or parse source; a lock around ``ast.parse``
(which ``literal_eval`` calls) makes them take turns.
"""

from __future__ import annotations

import ast
import sys
import threading

_LOCK = threading.RLock()


def install() -> None:
    """Wraps ``ast.parse`` in a process-wide lock, once (a no-op where the interpreter's state is per thread)."""
    if sys.version_info >= (3, 13) or getattr(ast.parse, "_one_thread", False):
        return
    unguarded = ast.parse

    def parse(*args, **kwargs):
        with _LOCK:
            return unguarded(*args, **kwargs)

    parse._one_thread = True  # type: ignore[attr-defined]  # marks the wrapper so a second install is a no-op
    parse.__doc__ = unguarded.__doc__
    parse.__wrapped__ = unguarded  # type: ignore[attr-defined]
    ast.parse = parse
