"""A dashboard session driven over Streamlit's own websocket protocol, without a browser.

It sends what the browser's frontend sends (``BackMsg`` protobufs on ``/_stcore/stream``: the first run with
the link's query string, button clicks as trigger values, the fragments' ``run_every`` reruns on their own
timers) and reads what the server sends back (``ForwardMsg``: the session, the page's elements, the script's
state). The server does exactly the work a browser session costs it; the client draws nothing, so many of them
measure the server alone on a machine too small to also run as many browsers.

The frontend behaviour mirrored here (Streamlit 1.67's ``App``): a ``new_session`` message of a full run (no
fragment ids in its run metadata) cancels every auto-rerun timer; ``auto_rerun`` (re)arms a fragment's timer
unless its interval is unchanged; ``stop_auto_rerun`` cancels the named ones. Widget values the client never
sends keep the value the server holds, as the frontend's unchanged widgets do.
"""

from __future__ import annotations

import asyncio
import time

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

ID_PREFIX = "$$ID-"  # a keyed widget's id is "$$ID-<hash>-<key>"


class StreamlitSession:
    def __init__(self, url: str, query: str = "", marker: bytes = b""):
        self.url, self.query, self.marker = url.rstrip("/"), query.lstrip("?"), marker
        self.page_hash = ""
        self.buttons: dict[str, tuple[str, bool]] = {}  # key -> (widget id, disabled)
        self.frames: list[tuple[float, bool]] = []  # (arrival, carries the marker)
        self.running = False
        self.runs_finished = 0
        self.idle_times: list[tuple[float, bool]] = []  # when the server said the script stopped running
        self.errors: list[str] = []  # exceptions the page showed
        self._idle = asyncio.Event()
        self._timers: dict[str, tuple[float, asyncio.Task]] = {}
        self._ws = None
        self._reader: asyncio.Task | None = None

    async def open(self, timeout: float = 180) -> None:
        """Connect and run the page once, as a browser opening the link does; returns when the run is over."""
        ws_url = "ws" + self.url[len("http") :] + "/_stcore/stream"
        self._ws = await websockets.connect(
            ws_url, subprotocols=["streamlit"], origin=self.url, max_size=None, ping_interval=None
        )
        self._reader = asyncio.create_task(self._read())
        await self.rerun()
        await self.wait_idle(timeout)

    async def close(self) -> None:
        for _, task in self._timers.values():
            task.cancel()
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)

    async def rerun(self, trigger: str | None = None, fragment_id: str = "", auto: bool = False) -> None:
        msg = BackMsg()
        state = msg.rerun_script
        state.query_string = self.query
        state.page_script_hash = self.page_hash
        if trigger is not None:
            widget = state.widget_states.widgets.add()
            widget.id = self.buttons[trigger][0]
            widget.trigger_value = True
        if fragment_id:
            state.fragment_id, state.is_auto_rerun = fragment_id, auto
        self._idle.clear()
        await self._ws.send(msg.SerializeToString())

    async def click(self, key: str) -> float:
        """Click the button with this key; returns the click's time (``time.perf_counter``)."""
        if key not in self.buttons:
            raise KeyError(f"no button {key!r} on the page (buttons: {sorted(self.buttons)})")
        if self.buttons[key][1]:
            raise RuntimeError(f"button {key!r} is disabled")
        t = time.perf_counter()
        await self.rerun(trigger=key)
        return t

    async def wait_idle(self, timeout: float) -> None:
        await asyncio.wait_for(self._idle.wait(), timeout)

    async def idle_after(self, t: float, timeout: float = 300) -> float:
        """The first time after ``t`` the server said the script stopped running (a fragment's run counts)."""
        return await first_after(self.idle_times, t, timeout, "the script still running", closed=self._closed)

    async def first_frame_after(self, t: float, timeout: float = 120) -> float:
        return await first_after(self.frames, t, timeout, "no message", closed=self._closed)

    async def marked_frame_after(self, t: float, timeout: float = 300) -> float:
        return await first_after(self.frames, t, timeout, "no marked message", marked=True, closed=self._closed)

    def _closed(self) -> bool:
        return self._reader is not None and self._reader.done()

    async def _read(self) -> None:
        async for data in self._ws:
            self.frames.append((time.perf_counter(), bool(self.marker) and self.marker in data))
            msg = ForwardMsg()
            msg.ParseFromString(data)
            self._handle(msg)

    def _handle(self, msg: ForwardMsg) -> None:
        kind = msg.WhichOneof("type")
        if kind == "new_session":
            self.page_hash = msg.new_session.page_script_hash
            if not msg.metadata.run.fragment_ids:
                self._cancel(list(self._timers))
        elif kind == "session_status_changed":
            self.running = msg.session_status_changed.script_is_running
            if not self.running:
                self.idle_times.append((time.perf_counter(), True))
                self._idle.set()
        elif kind == "script_finished":
            self.runs_finished += 1
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            element = msg.delta.new_element
            which = element.WhichOneof("type")
            if which == "button" and element.button.id.startswith(ID_PREFIX):
                key = element.button.id[len(ID_PREFIX) :].split("-", 1)[-1]
                self.buttons[key] = (element.button.id, element.button.disabled)
            elif which == "exception":
                self.errors.append(element.exception.message)
        elif kind == "auto_rerun":
            fid, interval = msg.auto_rerun.fragment_id, msg.auto_rerun.interval
            if fid and self._timers.get(fid, (None,))[0] != interval:
                self._cancel([fid])
                self._timers[fid] = (interval, asyncio.create_task(self._every(fid, interval)))
        elif kind == "stop_auto_rerun":
            self._cancel(list(msg.stop_auto_rerun.fragment_ids))

    def _cancel(self, ids: list[str]) -> None:
        for fid in ids:
            timer = self._timers.pop(fid, None)
            if timer is not None:
                timer[1].cancel()

    async def _every(self, fragment_id: str, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            await self.rerun(fragment_id=fragment_id, auto=True)


async def first_after(events: list, t: float, timeout: float, what: str, marked: bool = False, closed=None) -> float:
    """The first time later than ``t`` in ``events``, a list of (time, marked) that grows as messages arrive
    (only marked ones with ``marked``); waits for it, at most ``timeout`` seconds."""
    end = time.perf_counter() + timeout
    while True:
        hits = [x for x, m in events if x > t and (m or not marked)]
        if hits:
            return min(hits)
        if closed is not None and closed():
            raise ConnectionError("the server closed the session")
        if time.perf_counter() > end:
            raise TimeoutError(f"{what} within {timeout:g} s")
        await asyncio.sleep(0.005)
