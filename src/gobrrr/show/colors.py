"""One colour per regime, the same in the terminal, the page's styles and every figure:
a reader who learns "purple is compute" in one reads it in all.

Readable for the common red-green colour blindness: yellow / blue / purple for the three
single-process parts; communication (distributed reports) is Okabe and Ito's vermillion,
which that palette keeps apart from the other three. Hex, so rich (terminal) and CSS and
matplotlib all take the same string; rich maps it to the nearest colour a terminal has.
"""

from __future__ import annotations

__all__ = ["REGIME_COLORS"]

REGIME_COLORS = {"overhead": "#d99a00", "memory": "#1f78b4", "compute": "#9b2d9b",
                 "communication": "#d55e00", "none": "#888888"}
