"""What the server's prompt cache saves on consecutive chat turns, on a real llama-server.

    python bench/chat_cache.py [--turns 4] [--url URL] [--write-docs]

Each turn is `run_turn` in a scratch folder against `--url` or the small chat model (one slot):
the trace's prompt_n, cache_n, prompt_ms, total_ms. Turn 1 is cold; from turn 2 the system
prompt, tools and history are a cached prefix.
"""
from __future__ import annotations

import argparse
import tempfile

import harness
import docs_figures

QUESTIONS = ["Bonjour !", "What can you do?", "Say something short.", "Merci, au revoir."]


def run(url: str, turns: int) -> None:
    from forge.chat.run import run_turn
    from forge.store import traces

    with tempfile.TemporaryDirectory() as tmp:
        settings = harness.data_settings(tmp, LLAMA_CPP_URL=url, LLAMA_CPP_ID_SLOT="0",
                                         ENABLED_TOOLS="files,git")
        print(f"{'turn':>4} {'prompt_n':>8} {'cache_n':>7} {'prompt_ms':>9} {'total_ms':>8}  "
              "outcome")
        for i in range(turns):
            result = run_turn(settings, QUESTIONS[i % len(QUESTIONS)], max_tokens=48)
            record = traces.tail(settings.trace_file, 1)[-1]
            llm = record["llm"]
            print(f"{i + 1:>4} {llm['prompt_n']:>8} {llm['cache_n']:>7} {llm['prompt_ms']:>9.1f} "
                  f"{record['total_ms']:>8.1f}  {result.not_answered or 'answered'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=4)
    parser.add_argument("--url", help="an already running chat server")
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    with docs_figures.tee("chat_cache", args.write_docs), harness.chat_server(args.url) as url:
        run(url, args.turns)


if __name__ == "__main__":
    main()
