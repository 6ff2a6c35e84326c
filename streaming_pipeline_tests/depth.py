"""How deep the long scenarios go: one setting, STREAMING_PIPELINE_TEST_DEPTH (a whole number, default 1).

At 1 (the suite's default, sized for its budget) each scenario runs once through every assertion on a small load:
the kill fuzz kills twice (once in each live mode) and the live scenarios load 800 to 1,000 rides. A larger value
runs the same tests deeper, the sizes multiplied by it: `STREAMING_PIPELINE_TEST_DEPTH=10 python -m pytest -m slow`
kills 20 times.
"""

from __future__ import annotations

import os


def _depth() -> int:
    text = os.environ.get("STREAMING_PIPELINE_TEST_DEPTH", "1")
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"STREAMING_PIPELINE_TEST_DEPTH must be a whole number of 1 or more, not {text!r}")
    return int(text)


DEPTH = _depth()


def scaled(size: int) -> int:
    """`size` (what depth 1 runs) at the session's depth."""
    return size * DEPTH
