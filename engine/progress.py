"""Progress bars of the command line's long commands (``sweep``, ``audit``, ``plan``, ``run``, ``release``), drawn
by ``tqdm``.

A bar goes to stderr and only when stderr is a terminal: piped into a file or another program,
the command writes nothing but its result (JSON or CSV on stdout) and its errors.
"""

from __future__ import annotations

import sys
from collections.abc import Callable


def _terminal(stream) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def bar(total: int | None, what: str, *, unit: str = "run", stream=None, bar_format: str | None = None):
    """A ``tqdm`` bar of ``total`` steps on ``stream`` (default stderr), switched off unless it is a terminal.
    Use it as a context manager; ``update`` and ``set_postfix_str`` work either way."""
    from tqdm import tqdm

    stream = sys.stderr if stream is None else stream
    return tqdm(
        total=total,
        desc=what,
        unit=unit,
        file=stream,
        disable=not _terminal(stream),
        dynamic_ncols=True,
        bar_format=bar_format,
    )


def label(cfg) -> str:
    return f"{cfg.mechanism} eps={cfg.epsilon:g} seed={cfg.seed}"


def finished(progress, cfg) -> None:
    """One more run of ``progress`` is done: ``cfg`` names it."""
    progress.set_postfix_str(label(cfg), refresh=False)
    progress.update(1)


def on_finished(progress) -> Callable[[int, int, object], None]:
    """The ``progress(done, total, cfg)`` callback of :func:`engine.run.execution.run_many`, moving ``progress``."""

    def callback(done: int, total: int, cfg) -> None:
        progress.set_postfix_str(label(cfg), refresh=False)
        progress.update(done - progress.n)

    return callback


def fraction(what: str, stream=None):
    """A bar in per cent for work that reports ``(fraction, message)`` (an audit); returns the bar and
    that callback."""
    b = bar(100, what, unit="%", stream=stream, bar_format="{desc}: {percentage:3.0f}%|{bar}| {postfix}")

    def callback(frac: float, message: str) -> None:
        b.set_postfix_str(message, refresh=False)
        b.update(round(100 * min(max(frac, 0.0), 1.0)) - b.n)

    return b, callback


def counted(what: str, stream=None):
    """A bar for work that learns its total as it goes and reports ``(done, total, message)`` (a plan); shown
    from the start, so the wait before the first step is not silent. Returns the bar and that callback."""
    b = bar(None, what, unit=" run", stream=stream)

    def callback(done: int, total: int, message: str) -> None:
        if b.total != total:
            b.total = total
        b.set_postfix_str(message, refresh=False)
        b.update(done - b.n)

    return b, callback
