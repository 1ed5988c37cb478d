"""What the sessions of one server process share: the job board, each session's groups and files, the
quick reproductions.

* ``_board.py``: the results and jobs every session shares (:class:`Board`: ownership, memory bound);
* ``_groups.py``: a session's named groups of runs on the board (:class:`Session`, :class:`Group`);
* ``_run_session.py``: a session's runs from booking to settlement, each settled when it ends
  (:class:`RunSession`);
* ``_session_files.py``: each session's uploaded files, private to it (:class:`UploadStore`), and the
  server's settings read from the environment (:func:`env_float`);
* ``_quickruns.py``: the papers' quick reproductions, one queue for the server (:class:`QuickRuns`).
"""

from __future__ import annotations

from ._board import Board, Light
from ._groups import Group, Session
from ._quickruns import QuickRuns
from ._run_session import RunSession
from ._session_files import Upload, UploadStore, env_float

__all__ = ["Board", "env_float", "Group", "Light", "QuickRuns", "RunSession", "Session", "Upload", "UploadStore"]
