"""An exception as one line for a message: its first line, else its type's name."""

from __future__ import annotations


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
