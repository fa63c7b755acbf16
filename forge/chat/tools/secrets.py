"""Which workspace files hold secrets: the files and git tools refuse them unless
`FORGE_READ_SECRETS` is true. The defaults are the usual places of credentials; the patterns
of `FORGE_SECRET_FILES` are added to them. A pattern without `/` matches any component of the
path (so `.ssh` covers everything below it); one with `/` matches the whole relative path."""
from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath
from typing import Any

DEFAULT_PATTERNS = (
    ".env*", ".ssh", ".gnupg", ".netrc", ".pgpass", ".git-credentials", ".npmrc", ".pypirc",
    "*.pem", "*.key", "*.p12", "*.pfx", "id_rsa*", "id_dsa*", "id_ecdsa*", "id_ed25519*",
)


def patterns(settings: Any) -> tuple[str, ...]:
    extra = getattr(settings, "secret_files", None) or ""
    return DEFAULT_PATTERNS + tuple(p.strip() for p in extra.split(",") if p.strip())


def secret_pattern(relative: str, settings: Any) -> str | None:
    """The pattern `relative` (a path under the workspace) matches, or None. Always None when
    FORGE_READ_SECRETS allows secrets."""
    if getattr(settings, "read_secrets", False):
        return None
    path = PurePosixPath(relative.replace("\\", "/"))
    parts = [p for p in path.parts if p not in ("", ".", "/")]
    whole = "/".join(parts)
    for pattern in patterns(settings):
        if "/" in pattern:
            if fnmatch.fnmatchcase(whole, pattern.strip("/")):
                return pattern
        elif any(fnmatch.fnmatchcase(part, pattern) for part in parts):
            return pattern
    return None


def refusal(tool: str, relative: str, pattern: str) -> str:
    return (f"{tool}: {relative!r} may hold secrets (matches {pattern!r}); it is not read unless "
            "FORGE_READ_SECRETS=true (FORGE_SECRET_FILES adds patterns)")


def git_excludes(settings: Any) -> list[str]:
    """Pathspecs that keep secret files out of git's output (diff, log -p, show, status)."""
    if getattr(settings, "read_secrets", False):
        return []
    out = []
    for pattern in patterns(settings):
        if "/" in pattern:
            out.append(f":(exclude,glob){pattern.strip('/')}")
        else:
            out += [f":(exclude,glob)**/{pattern}", f":(exclude,glob)**/{pattern}/**"]
    return out
