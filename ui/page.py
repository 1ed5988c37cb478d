"""What every page does around its own content: the router, the title, the sidebar's controls and their
errors, the Run button with its progress panel and messages, and the URL.

A page reads::

    with page("Compare mechanisms", "What the page does.", sidebar={"mechanisms": "multi"}) as p:
        g = p.launch("compare", configs, label="Compare")
        show = p.shown("compare", g, whole=True)
        ...
        p.url["rank"] = metric

On leaving the block the URL holds ``p.url`` (the sidebar's settings and what the page added); a page that
stops early calls :meth:`Page.stop`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import streamlit as st

from engine.run import RunConfig

from . import boot, controls, jobs, release, run_button, state, views
from .text import plain


@dataclass
class Page:
    """One run of a page's script (see :func:`page` for the arguments): its controls ``ctl`` (None without a
    sidebar), its URL ``url``, and, for a compact header, ``aside`` (the right half of the title's row)."""

    title: str
    blurb: str
    sidebar: dict | None = None
    release_only: str = ""
    compact: bool = False
    keep_url: bool = True
    ctl: controls.Controls | None = field(default=None, init=False)
    url: dict = field(default_factory=dict, init=False)
    aside: object = field(default=None, init=False)
    current: bool = field(default=False, init=False)  # whether the group :meth:`shown` returned is the one asked for
    _configs: dict[str, list[RunConfig]] = field(default_factory=dict, init=False, repr=False)

    def __enter__(self) -> Page:
        boot.ensure_router()  # first: a deep link on a fresh server must go through app.py
        if self.compact:  # a page whose maps must fit the window: the title in one small line, beside ``aside``
            head = st.columns([1, 1], vertical_alignment="bottom")
            self.aside = head[1].container()
            with head[0]:
                views.header(self.title, self.blurb, compact=True)
        else:
            views.header(self.title, self.blurb)
        if self.sidebar is not None:
            self.ctl = controls.sidebar(**self.sidebar)
            for e in self.ctl.errors:
                st.error(plain(e, 600))
            if self.release_only:
                release.release_only_page(self.ctl, self.release_only)
            self.url = dict(self.ctl.url)
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:  # st.stop and st.rerun leave the URL as it was
            self._sync()

    def _sync(self) -> None:
        if self.keep_url:
            state.sync_url(self.url)

    def stop(self) -> None:
        """End the page here, its URL written."""
        self._sync()
        st.stop()

    def launch(
        self,
        name: str,
        configs: list[RunConfig],
        label: str,
        title: str = "Running",
        caption: str = "",
        whole: bool = False,
        **kw,
    ):
        """The Run button of the group ``name`` (:func:`ui.run_button.launch`, ``kw`` passed on), ``caption`` under its
        row, and the progress panel of its runs (``whole``: the page draws the group once all of it has
        finished, :meth:`shown`); returns the session's group."""
        g = run_button.launch(name, configs, self.ctl, label, **kw)
        if caption:
            st.caption(caption)
        jobs.progress_panel([name], title, whole)
        self._configs[name] = configs
        return g

    def shown(self, name: str, g, whole: bool = False, notices=None, any_dataset: bool = False):
        """The failures and cancellations of ``g`` (in ``notices``, default here), and the group the page
        draws (:func:`ui.jobs.shown`); when it is the one the settings ask for, the URL says ``run=1``. Another
        dataset's group is neither drawn nor reported, unless ``any_dataset``."""

        def mine(group):
            return group if any_dataset else views.of_dataset(group, self.ctl)

        if mine(g) is not None:
            views.outcome_messages(g, notices)
        show = mine(jobs.shown(name, g, whole))
        self.current = run_button.is_current(show, self._configs.get(name, []))
        if self.current:
            self.url["run"] = 1
        return show


def page(title: str, blurb: str, **options) -> Page:
    """The page's frame (see the module's docstring), titled ``title`` over ``blurb``. Options: ``sidebar``, the
    keyword arguments of :func:`ui.controls.sidebar` (absent: no run controls); ``release_only``, what the page is
    called when it compares with the truth and so stops in Release mode; ``compact``, a one-line title;
    ``keep_url=False`` for a page that keeps no state in the URL."""
    return Page(title, blurb, **options)
