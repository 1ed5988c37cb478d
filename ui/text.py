"""User-supplied strings (file, column and layer names, and engine messages quoting them) shown as plain text.

Streamlit renders the body of ``st.markdown``, ``st.error``, ``st.info``, captions and progress texts as
Markdown: a file named ``![x](http://host/p.png).csv`` would make every viewer's browser request that
host. :func:`plain` backslash-escapes every character Markdown, Streamlit's directives (``:red[…]``,
``:material/…:``) or LaTeX (``$…$``) would act on, so the string reads exactly as typed.
"""

from __future__ import annotations

import re

_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~:$&=\"'])")


def plain(s: object, limit: int = 200) -> str:
    """``s`` as literal text inside Markdown (newlines folded, at most ``limit`` characters)."""
    text = " ".join(str(s).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return _SPECIAL.sub(r"\\\1", text)
