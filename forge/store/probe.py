"""What a configured PostgreSQL server is, for doctor: facts only (doctor words them), read-only,
named without the password (forge/store/postgres.connect's errors already are)."""
from __future__ import annotations

from typing import Any


def postgres_facts(url: str) -> dict[str, Any]:
    """{"version": server version, "pgvector": installed version or None, "pgvector_available":
    the version the server could install, or None}. Raises StoreError (one line, the URL
    without its password) when the server cannot be reached, refuses the password, or the
    driver is missing."""
    from .postgres import connect

    conn = connect(url)
    try:
        version = conn.execute("show server_version").fetchone()[0]
        row = conn.execute("select default_version, installed_version from "
                           "pg_available_extensions where name = 'vector'").fetchone()
    finally:
        conn.close()
    return {"version": version, "pgvector": row[1] if row else None,
            "pgvector_available": row[0] if row else None}
