"""One option's value, parsed: a boolean, an integer with its bound, a choice; every error an
`OptionError` naming the option and what it must be.
"""

from __future__ import annotations

from collections.abc import Mapping


class OptionError(ValueError):
    """An option that cannot work, named, with the fix."""


def bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = options.get(name.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "false"):
        return raw.strip().lower() == "true"
    raise OptionError(f"option {name}={raw!r} must be true or false")


def int_option(
    options: Mapping[str, str], name: str, default: int | None, minimum: int
) -> int | None:
    raw = options.get(name.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise OptionError(f"option {name}={raw!r} must be an integer") from None
    if value < minimum:
        raise OptionError(f"option {name}={value} must be >= {minimum}")
    return value


def choice_option(
    options: Mapping[str, str], name: str, default: str, choices: tuple[str, ...]
) -> str:
    value = options.get(name.lower(), default).strip().lower()
    if value not in choices:
        raise OptionError(f"option {name}={value!r} must be one of {', '.join(choices)}")
    return value
