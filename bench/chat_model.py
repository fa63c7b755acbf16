"""What Forge gets from the chat model's server: its tokenizer against Forge's token estimate,
its prompt cache across chat turns, and whether the model can tell a log block does not answer.

    python bench/chat_model.py tokens|cache|verdict [--url URL] [--turns 4] [--write-docs]

The server is `--url`, or the small chat model started for the run (one slot).
- tokens: `estimate_tokens` against `/tokenize` on the sample transcript, the router prompt, PROSE
  and the forge package in 40-line chunks, per category: the error, mean and worst.
- cache: `--turns` turns of `run_turn`: the trace's prompt_n, cache_n, prompt_ms, total_ms.
- verdict: the blocks of bench/sysadmin_verdict.yaml (WRITTEN, NOT COLLECTED) as the sysadmin
  tool shows them, the model asked YES or NO: each case, then the verdict matrix.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from types import SimpleNamespace

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
TURNS = ["Bonjour !", "What can you do?", "Say something short.", "Merci, au revoir."]
CASES = harness.ROOT / "bench" / "sysadmin_verdict.yaml"
VERDICT_INSTRUCTION = ("Before answering, judge only this: does the log block above contain the "
                       "answer to the question? Reply with exactly one word: YES if it does, NO "
                       "if it does not.")
VERDICTS = ("YES", "NO", "unclear")


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


def tokens(url: str, args: argparse.Namespace) -> None:
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


def cache(url: str, args: argparse.Namespace) -> None:
    from forge.chat.run import run_turn
    from forge.store import traces

    with tempfile.TemporaryDirectory() as tmp:
        settings = harness.data_settings(tmp, LLAMA_CPP_URL=url, LLAMA_CPP_ID_SLOT="0",
                                         ENABLED_TOOLS="files,git")
        print(f"{'turn':>4} {'prompt_n':>8} {'cache_n':>7} {'prompt_ms':>9} {'total_ms':>8}  "
              "outcome")
        for i in range(args.turns):
            result = run_turn(settings, TURNS[i % len(TURNS)], max_tokens=48)
            record = traces.tail(settings.trace_file, 1)[-1]
            llm = record["llm"]
            print(f"{i + 1:>4} {llm['prompt_n']:>8} {llm['cache_n']:>7} {llm['prompt_ms']:>9.1f} "
                  f"{record['total_ms']:>8.1f}  {result.not_answered or 'answered'}")


def verdict_messages(case: dict) -> list[dict[str, str]]:
    """The sysadmin tool's answer prompt on the written block, the verdict asked at its end."""
    from forge.chat.tools.sysadmin import Collection, answer_messages

    collection = Collection(target="fixture", commands=["written"], block=case["block"], cut=False)
    messages = answer_messages(collection, case["question"])
    messages[-1] = {"role": "user",
                    "content": messages[-1]["content"] + "\n\n" + VERDICT_INSTRUCTION}
    return messages


def read_verdict(text: str) -> str:
    words = text.strip().strip("*`\"'.").split()
    first = words[0].strip(".,!:*").lower() if words else ""
    return {"yes": "YES", "oui": "YES", "no": "NO", "non": "NO"}.get(first, "unclear")


def verdict(url: str, args: argparse.Namespace) -> None:
    import yaml

    from forge.core.llm import ChatClient

    cases = yaml.safe_load(CASES.read_text(encoding="utf-8"))["cases"]
    print("inputs: WRITTEN fixtures (bench/sysadmin_verdict.yaml), not collected from any machine")
    client = ChatClient(SimpleNamespace(llama_cpp_url=url, llama_cpp_id_slot=None,
                                        llama_cpp_timeout=120))
    matrix = {(truth, v): 0 for truth in (True, False) for v in VERDICTS}
    models: set[str] = set()
    started = time.monotonic()
    with client:
        for case in cases:
            completion = client.complete(verdict_messages(case), max_tokens=4, temperature=0.0)
            said = read_verdict(completion.content)
            models.update([completion.model] if completion.model else [])
            matrix[(bool(case["answers"]), said)] += 1
            right = (said == "YES") == bool(case["answers"]) and said != "unclear"
            print(f"  {case['id']:<12} block {'answers' if case['answers'] else 'does not':<9} "
                  f"model {said:<8} {'ok' if right else 'WRONG'}  "
                  f"({completion.content.strip()[:30]!r})")
    print(f"\nmodel: {', '.join(sorted(models)) or 'unnamed'} at {url}; "
          f"{len(cases)} cases in {time.monotonic() - started:.1f} s\n")
    print(f"{'':<22}{'model YES':>10}{'model NO':>10}{'unclear':>9}")
    for truth, label in ((True, "block answers"), (False, "block does not")):
        n = sum(matrix[(truth, v)] for v in VERDICTS)
        print(f"{label + f' (n={n})':<22}{matrix[(truth, 'YES')]:>10}{matrix[(truth, 'NO')]:>10}"
              f"{matrix[(truth, 'unclear')]:>9}")
    misses = sum(matrix[(False, v)] for v in VERDICTS)
    print(f"\ncan tell a block does not answer: {matrix[(False, 'NO')]}/{misses}; "
          f"recognises an answering block: {matrix[(True, 'YES')]}/{len(cases) - misses}")


def main() -> None:
    modes = {"tokens": tokens, "cache": cache, "verdict": verdict}
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=modes)
    parser.add_argument("--url", help="a running chat server (default: start the small model)")
    parser.add_argument("--turns", type=int, default=4, help="cache: chat turns")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with docs_figures.tee(f"chat_model-{args.mode}", args.write_docs), \
            harness.chat_server(args.url) as url:
        modes[args.mode](url.rstrip("/"), args)


if __name__ == "__main__":
    main()
