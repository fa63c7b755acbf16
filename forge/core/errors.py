"""Forge's exceptions. The CLI translates them once, at its boundary, into one line and exit 1."""
from __future__ import annotations


class ForgeError(Exception):
    """A runtime failure the user can act on: the message is one line and says what to do."""


class SettingsError(ForgeError):
    """A setting has a bad value, or settings are inconsistent with each other."""

    def __init__(self, variable: str, message: str):
        self.variable = variable
        super().__init__(f"{variable}: {message}")


class CorruptFileError(ForgeError):
    """A store file does not parse. It is never overwritten."""


class StoreError(ForgeError):
    """The deliberate store cannot be opened or used."""


class DamagedStoreError(StoreError):
    """The database file is damaged or is not a database: named, left untouched, how to check it."""

    def __init__(self, path: str, problem: str):
        import shlex

        self.path = path
        super().__init__(
            f"{path}: {problem}; the file was left untouched. Check it with "
            f"`sqlite3 {shlex.quote(str(path))} \"pragma integrity_check\"` and recover it from a "
            "backup (`forge reindex` does not help: it re-embeds the entries this file holds)")


class NotFoundError(ForgeError):
    """An id or name given by the user does not exist."""


class LockTimeout(ForgeError):
    """Another forge process held a lock for longer than we are willing to wait."""


class ServerError(ForgeError):
    """A model server could not be reached or answered something unusable.

    The message names the URL and how to start a server, so a cron log says what to fix.
    """

    def __init__(self, url: str, problem: str, hint: str | None = None):
        self.url = url
        self.problem = problem
        self.hint = hint
        text = f"{problem} ({url})"
        if hint:
            text += f"; {hint}"
        super().__init__(text)
