"""The word channel's one tokenizer, for every backend: SQLite's `unicode61 remove_diacritics 2`.

SQLite's FTS5 cuts and folds words with it inside the store. PostgreSQL's `simple`
configuration keeps accents (and `unaccent` is not in the package), so the Postgres backend
folds in Python before the text reaches `tsvector`: with THIS function, which asks SQLite's
own tokenizer (an in-memory FTS5 table of the `sqlean.py` binding every install has), so the
two backends cut and fold every word the same way, letter for letter, not by a copy of its
Unicode tables that would drift. Cost: about 30 µs for a sentence.
"""
from __future__ import annotations

import threading
from typing import Any

TOKENIZER = "unicode61 remove_diacritics 2"

_local = threading.local()


def _conn() -> Any:
    conn = getattr(_local, "conn", None)
    if conn is None:
        from . import db

        conn = db.connect(":memory:", vec=False)
        conn.execute(f"create virtual table fold_tokens using fts5(t, tokenize='{TOKENIZER}')")
        conn.execute("create virtual table fold_vocab using fts5vocab(fold_tokens, instance)")
        _local.conn = conn
    return conn


def words(text: str) -> list[str]:
    """Every word of `text`, in order, repeats kept, as FTS5's tokenizer cuts and folds them."""
    if not text:
        return []
    conn = _conn()
    conn.execute("insert into fold_tokens(rowid, t) values (1, ?)", (text,))
    try:
        rows = conn.execute("select term from fold_vocab order by offset").fetchall()
    finally:
        conn.execute("delete from fold_tokens")
    return [r[0] for r in rows]


def distinct_words(text: str) -> list[str]:
    """The query's words, first occurrence order, each once."""
    return list(dict.fromkeys(words(text)))
