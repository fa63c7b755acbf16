"""How far `forge.core.tokens.estimate_tokens` is from a real tokenizer, on French, English and code.

    python bench/token_estimator.py [--url http://127.0.0.1:8080] [--write-docs]

Samples (the sample transcript, the router prompt, PROSE, the forge package in 40-line chunks)
against the `/tokenize` of `--url` or of the small chat model: mean absolute error, worst over-
and under-estimate, ratio of the sums, per category.
"""
from __future__ import annotations

import argparse
import json
import statistics

import harness
import docs_figures

PROSE = {
    "fr": [
        "Le mini-PC tourne sous Arch Linux ; les services sont des conteneurs Podman sans "
        "privilèges, démarrés par des unités systemd générées depuis des fichiers Quadlet.",
        "Décision prise le 12 septembre : on garde Pi-hole, pas de migration vers AdGuard Home, "
        "parce que la migration n'apporte aucun gain mesurable et coûte une soirée.",
        "Je n'ai rien trouvé en mémoire qui réponde à cette question. Reformule-la, ou dis-moi "
        "où chercher : le fichier de notes, l'historique git, ou les sauvegardes.",
        "Qu'est-ce qui consomme le plus d'électricité chez moi, d'après les mesures du wattmètre ?",
    ],
    "en": [
        "Retrieval answers proximity questions, not completeness questions: a list of every "
        "machine I own wants a set, and a threshold only reorders the rows it returns.",
        "The embedding server was unreachable, so the compaction could not archive the oldest "
        "exchanges; the history will grow past its cap until the next compaction succeeds.",
        "Remind me what we decided about the backup retention policy last month?",
    ],
}


FRENCH = (" le ", " la ", " les ", " je ", " un ", " une ", " de ", " est ", "é")


def samples() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {"fr": list(PROSE["fr"]), "en": list(PROSE["en"]), "code": []}
    transcript = harness.ROOT / "forge" / "samples" / "transcript.jsonl"
    for line in transcript.read_text(encoding="utf-8").splitlines():
        text = json.loads(line)["content"]
        # The sample's French has accents and French function words; that is enough to sort it.
        french = any(w in f" {text.lower()} " for w in FRENCH)
        out["fr" if french else "en"].append(text)
    from forge.memory import router_prompt as prompt

    out["en"].append(prompt.system_text(("memory", "files", "git", "shell")))
    for path in sorted((harness.ROOT / "forge").rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for start in range(0, len(lines), 40):
            chunk = "\n".join(lines[start:start + 40])
            if chunk.strip():
                out["code"].append(chunk)
    return out


def measure(url: str) -> None:
    import httpx

    from forge.core.tokens import estimate_tokens

    client = httpx.Client(timeout=60, trust_env=False)
    rows = []
    for category, texts in samples().items():
        for text in texts:
            real = len(client.post(f"{url}/tokenize", json={"content": text}).json()["tokens"])
            if real:
                rows.append((category, real, estimate_tokens(text)))
    print(f"estimate_tokens against {url}/tokenize")
    print(f"{'category':8} {'samples':>7} {'real':>7} {'estimate':>8} {'sum ratio':>9} "
          f"{'mean |err|':>10} {'worst over':>10} {'worst under':>11}")
    for category in ("fr", "en", "code", "all"):
        sel = [r for r in rows if category == "all" or r[0] == category]
        errors = [(est - real) / real for _, real, est in sel]
        real_sum, est_sum = sum(r for _, r, _ in sel), sum(e for _, _, e in sel)
        print(f"{category:8} {len(sel):7d} {real_sum:7d} {est_sum:8d} {est_sum / real_sum:9.3f} "
              f"{statistics.mean(abs(e) for e in errors):10.1%} {max(errors):+10.1%} "
              f"{min(errors):+11.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running llama-server; default: start one")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with docs_figures.tee("token_estimator", args.write_docs), harness.chat_server(args.url) as url:
        measure(url.rstrip("/"))


if __name__ == "__main__":
    main()
