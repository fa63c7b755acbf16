"""Forge's one logger, "forge", with `logging` imported on its first use.

A command that logs nothing (`forge memory ls`, `forge trace tail`, `forge --help`) never loads
`logging` (~6 ms of a 45 ms process, with traceback and string). Every module writes
`from .log import log` and calls `log.warning(...)`, `log.info(...)` as on a Logger. The CLI
hands its stderr handler to `when_loaded`: set at once when `logging` is loaded already (tests,
the server, a library that imported it), else just before the first message.
"""
from __future__ import annotations

import sys
from typing import Any, Callable

NAME = "forge"

# The CLI's setup, waiting for a first message: at most one, taken by list.pop (atomic), so two
# threads logging first at once run it once.
_pending: list[Callable[[Any], None]] = []


def when_loaded(setup: Callable[[Any], None]) -> None:
    """Run `setup(logger)` on the "forge" Logger now if `logging` is loaded, else before the
    first message goes through `log`."""
    _pending.clear()
    loaded = sys.modules.get("logging")
    if loaded is None:
        _pending.append(setup)
    else:
        setup(loaded.getLogger(NAME))


def logger() -> Any:
    """The "forge" Logger (imports `logging`, and runs the setup `when_loaded` left waiting)."""
    import logging

    found = logging.getLogger(NAME)
    if _pending:
        try:
            setup = _pending.pop()
        except IndexError:  # another thread took it
            return found
        setup(found)
    return found


class _Lazy:
    """Stands for the "forge" Logger: any attribute is the Logger's, fetched on use."""

    def __getattr__(self, name: str) -> Any:
        return getattr(logger(), name)


log: Any = _Lazy()
