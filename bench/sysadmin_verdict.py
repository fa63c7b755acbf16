"""Can the configured chat model tell that a log block does NOT answer a question?

    python bench/sysadmin_verdict.py [--url URL | --start] [--write-docs]

THE INPUTS ARE WRITTEN, NOT COLLECTED: every block and question is in
bench/sysadmin_verdict.yaml, written by hand; a verdict is a verdict on those fixtures. The model
(LLAMA_CPP_URL, `--url`, or `--start`: the small test model for the run) sees each block as the
sysadmin tool shows it and answers YES or NO; the script prints each case and the verdict matrix.
"""
from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import harness
import docs_figures

CASES = harness.ROOT / "bench" / "sysadmin_verdict.yaml"
VERDICT_INSTRUCTION = (
    "Before answering, judge only this: does the log block above contain the answer to the "
    "question? Reply with exactly one word: YES if it does, NO if it does not."
)
VERDICTS = ("YES", "NO", "unclear")


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


def run(url: str, cases: list[dict]) -> None:
    from forge.core.llm import ChatClient

    print("inputs: WRITTEN fixtures (bench/sysadmin_verdict.yaml), not collected from any machine")
    client = ChatClient(SimpleNamespace(llama_cpp_url=url, llama_cpp_id_slot=None,
                                        llama_cpp_timeout=120))
    matrix = {(truth, v): 0 for truth in (True, False) for v in VERDICTS}
    models: set[str] = set()
    started = time.monotonic()
    with client:
        for case in cases:
            completion = client.complete(verdict_messages(case), max_tokens=4, temperature=0.0)
            verdict = read_verdict(completion.content)
            models.update([completion.model] if completion.model else [])
            matrix[(bool(case["answers"]), verdict)] += 1
            right = (verdict == "YES") == bool(case["answers"]) and verdict != "unclear"
            print(f"  {case['id']:<12} block {'answers' if case['answers'] else 'does not':<9} "
                  f"model {verdict:<8} {'ok' if right else 'WRONG'}  "
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
    import yaml

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="chat server (default: LLAMA_CPP_URL from the settings)")
    parser.add_argument("--start", action="store_true",
                        help="start the small test model for the run")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    cases = yaml.safe_load(CASES.read_text(encoding="utf-8"))["cases"]
    if not args.start and not args.url:
        from forge.core.settings import load_settings

        args.url = load_settings().llama_cpp_url
    with docs_figures.tee("sysadmin_verdict", args.write_docs), \
            harness.chat_server(None if args.start else args.url) as url:
        run(url, cases)


if __name__ == "__main__":
    main()
