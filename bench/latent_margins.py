#!/usr/bin/env python3
"""Why does the latent-term channel put another entry first? Its margin, term by term.

    python bench/latent_margins.py --keep DIR [--write-docs]

On the small personal sets of bench/recall_sets.py (personal, French, no-word, held-out: their
stores under DIR, built once), for every question whose latent channel (sparse.search) ranks
another entry first, the margin of that entry's dot product over the right entry's is split
over the admitted terms that make it, by what the term is:

- its document frequency in the store (held by 1, 2-3, or 4+ entries: admitted up to 0.2 N);
- what it fires on in 80 sentences written for this bench, none about the sets' subjects
  (20 each: French facts, French likings, English facts, English likings): a *language*
  feature fires on a quarter or more of one language's sentences and on a third as many of the
  other's; a *liking* feature (the phrasing of a preference: `je préfère`, `I like`) on a
  quarter or more of the likings and a third as many of the facts; *broad* on a quarter or
  more of all; every other term is *subject*.

It also prints each set's top-1 for the vector channel alone, the latent channel alone, the
fused ranking (`forge recall`) and the better of the two channels' first rows (what no
ordering of the two can beat), and the two entries each channel puts first most often when
another is the answer (an entry near every question of the set: a hub).
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

FR_FACTS = ["Le train pour Marseille part à huit heures", "La piscine municipale ouvre le dimanche",
            "Mon oncle répare des horloges anciennes", "Le musée a fermé pour travaux",
            "Les cerises sont mûres en juin", "Le pont a été construit en 1890",
            "La réunion a duré deux heures", "Le chien du voisin aboie la nuit",
            "Il a neigé sur les Vosges ce week-end", "La bibliothèque prête des jeux de société",
            "Le boulanger a augmenté ses prix", "Ma cousine étudie la chimie à Grenoble",
            "Le parking est payant après 9 h", "Le concert a été annulé à cause de la pluie",
            "La mairie distribue des composteurs", "Le lave-linge fuit un peu",
            "Les enfants ont fabriqué une cabane", "Le col du Galibier est fermé l'hiver",
            "La facture de gaz a doublé", "Le tram passe toutes les six minutes"]
FR_LIKINGS = ["Je préfère la mer à la montagne", "J'aime les pommes croquantes",
              "Je préfère travailler tôt le matin", "J'adore les romans historiques",
              "Je préfère le vin rouge au blanc", "J'aime marcher en forêt",
              "Je préfère les chemises en lin", "Je déteste les réunions trop longues",
              "Je préfère payer en espèces", "J'aime cuisiner le dimanche",
              "Je préfère dormir la fenêtre ouverte", "J'aime le chocolat noir",
              "Je préfère les voitures électriques", "J'aime les jeux de plateau",
              "Je préfère lire sur papier", "Je n'aime pas le fromage de chèvre",
              "Je préfère les pulls en laine", "J'aime écouter la pluie",
              "Je préfère le vélo au métro", "J'aime les pique-niques"]
EN_FACTS = ["The train to Boston leaves at eight", "The public pool opens on Sundays",
            "My uncle repairs old clocks", "The museum closed for renovation",
            "Cherries ripen in June", "The bridge was built in 1890", "The meeting lasted two hours",
            "The neighbour's dog barks at night", "It snowed in the mountains this weekend",
            "The library also lends board games", "The baker raised his prices",
            "My cousin studies chemistry in Leeds", "Parking is paid after 9 am",
            "The concert was cancelled because of the rain",
            "The town hall hands out compost bins", "The washing machine leaks a little",
            "The kids built a treehouse", "The pass is closed in winter", "The gas bill doubled",
            "The tram comes every six minutes"]
EN_LIKINGS = ["I prefer the sea to the mountains", "I like crunchy apples",
              "I prefer working early in the morning", "I love historical novels",
              "I prefer red wine to white", "I like walking in the woods",
              "I prefer linen shirts", "I hate long meetings", "I prefer paying cash",
              "I like cooking on Sundays", "I prefer sleeping with the window open",
              "I like dark chocolate", "I prefer electric cars", "I like board games",
              "I prefer reading on paper", "I don't like goat cheese", "I prefer wool sweaters",
              "I like listening to the rain", "I prefer cycling to the metro", "I like picnics"]
SETS = {"personal": "personal_facts.json", "french": "french_personal.json",
        "no-word": "french_no_word.json", "held-out": "no_word_heldout.json"}
CLASSES = ("language", "liking", "broad", "subject")
BUCKETS = ("df 1", "df 2-3", "df 4+")


def classifier(embedder):
    """term -> its class, from the rates at which it fires on the bench's sentences."""
    def rates(texts: list[str]) -> Counter:
        seen: Counter = Counter()
        for terms in embedder.sparse_documents(texts):
            seen.update(t for t, _ in terms)
        return Counter({t: n / len(texts) for t, n in seen.items()})

    fr, en = rates(FR_FACTS + FR_LIKINGS), rates(EN_FACTS + EN_LIKINGS)
    liking, fact = rates(FR_LIKINGS + EN_LIKINGS), rates(FR_FACTS + EN_FACTS)
    every = rates(FR_FACTS + FR_LIKINGS + EN_FACTS + EN_LIKINGS)

    def kind(term: int) -> str:
        if max(fr[term], en[term]) >= 0.25 and min(fr[term], en[term]) <= max(fr[term], en[term]) / 3:
            return "language"
        if liking[term] >= 0.25 and fact[term] <= liking[term] / 3:
            return "liking"
        return "broad" if every[term] >= 0.25 else "subject"
    return kind


def measure(folder: Path, data: dict, ids: dict[str, int], kind) -> dict:
    from recall_sets import open_settings

    from forge.store import rag
    from forge.recall import channels, many, rank, sparse

    out = {"n": len(data["hits"]), "vector": 0, "latent": 0, "fused": 0, "either": 0,
           "wrong": [], "by_class": Counter(), "by_df": Counter(),
           "vector_hubs": Counter(), "latent_hubs": Counter()}
    with rag.open_store(open_settings(folder)) as store:
        questions = [h["question"] for h in data["hits"]]
        vectors = many.embed_queries(store, questions)
        names = {v: k for k, v in ids.items()}
        for hit, vec in zip(data["hits"], vectors):
            want = ids[hit["expect"]]
            vector = channels.search_vector(store, vec, k=1)
            latent = sparse.search(store, hit["question"], k=1)
            fused = rank.search(store, hit["question"], limit=10, query_vector=vec).rows
            v_ok, l_ok = bool(vector) and vector[0][0] == want, bool(latent) and latent[0][0] == want
            out["vector"] += v_ok
            out["latent"] += l_ok
            out["either"] += v_ok or l_ok
            out["fused"] += bool(fused) and fused[0].entry.id == want
            if vector and not v_ok:
                out["vector_hubs"][names.get(vector[0][0], vector[0][0])] += 1
            if latent and not l_ok:
                out["latent_hubs"][names.get(latent[0][0], latent[0][0])] += 1
            if not latent or l_ok:
                continue
            top = latent[0][0]
            terms = sparse.admitted(store, store.embedder.sparse_query(hit["question"]))
            df = store.backend.sparse_frequency([t for t, _ in terms])
            weights = {e: dict(store.backend.conn.execute(
                "select term, weight from memory_sparse where entry_id = ?", (e,)).fetchall())
                for e in (top, want)}
            margin = Counter()
            for term, w in terms:
                share = w * (weights[top].get(term, 0.0) - weights[want].get(term, 0.0))
                out["by_class"][kind(term)] += share
                margin[kind(term)] += share
                out["by_df"][BUCKETS[0 if df[term] == 1 else 1 if df[term] <= 3 else 2]] += share
            out["wrong"].append((hit["question"], names.get(top, top), hit["expect"],
                                 v_ok, sum(margin.values()), margin))
    return out


def main(argv: list[str] | None = None) -> int:
    import docs_figures
    from recall_sets import FIXTURES, personal_store

    from forge.embedders.embedded import EmbeddedEmbedder

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--keep", type=Path, required=True,
                        help="the stores of bench/recall_sets.py --keep DIR (built when absent)")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args(argv)
    kind = classifier(EmbeddedEmbedder())
    total_class: Counter = Counter()
    total_df: Counter = Counter()
    with docs_figures.tee("latent_margins", args.write_docs):
        print(f"{'set':9} {'questions':>9} {'vector':>6} {'latent':>6} {'fused':>5} "
              f"{'either':>6}   (top-1: each channel alone, forge recall, the better of the two; "
              "then the entries each channel puts first most often when another is right)")
        rows = []
        for name, fixture in SETS.items():
            data, ids = personal_store(args.keep / name, FIXTURES / fixture)
            r = measure(args.keep / name, data, ids, kind)
            rows.append((name, r))
            total_class.update(r["by_class"])
            total_df.update(r["by_df"])
            hubs = "; ".join(f"{channel} " + ", ".join(f"{k} {n}x" for k, n in
                                                       r[f"{channel}_hubs"].most_common(2))
                             for channel in ("vector", "latent"))
            print(f"{name:9} {r['n']:9d} {r['vector']:6d} {r['latent']:6d} {r['fused']:5d} "
                  f"{r['either']:6d}   {hubs}")
        print("\nquestions whose latent channel puts another entry first: the margin of its dot "
              "product over the right entry's, by term class")
        print(f"{'set':9} {'right':>14} {'latent first':>14} {'vector 1st':>10} {'margin':>6}  "
              + " ".join(f"{c:>8}" for c in CLASSES))
        for name, r in rows:
            for q, top, right, v_ok, total, margin in r["wrong"]:
                print(f"{name:9} {right[:14]:>14} {str(top)[:14]:>14} {str(v_ok):>10} "
                      f"{total:6.2f}  " + " ".join(f"{margin[c]:8.2f}" for c in CLASSES))
        whole = sum(total_class.values())
        print(f"\nover {sum(len(r['wrong']) for _, r in rows)} questions, the margins sum to "
              f"{whole:.2f}: " + ", ".join(f"{c} {total_class[c] / whole:.0%}" for c in CLASSES)
              + "; by document frequency: " + ", ".join(f"{b} {total_df[b] / whole:.0%}"
                                                       for b in BUCKETS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
