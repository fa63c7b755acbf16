"""`forge serve` under load: 4 concurrent clients on loopback, `forge compact` from "cron".

    python bench/serve_load.py [--clients 4] [--requests 60] [--seconds 120] [--entries 200]
                               [--compact-every 3] [--write-docs]

Starts a scripted chat server (tests/fakeserver.py: every turn is a plain chat reply, so each
one is persisted) and `forge serve` on a scratch data folder holding `--entries` memories, then
runs `--clients` threads, each with its own keep-alive connection, for at most `--requests`
requests each and at most `--seconds` in all. Each client cycles through /health (the in-run
baseline each median is divided by), remember (a text of
its own, and every fifth one a text all clients send: one row must result), search, a page of
/memory (a filter every other time), forget (one of its own earlier entries) and chat, while
`forge compact --json` runs every `--compact-every` seconds in another process.

Prints requests per second, p50 / p99 per route, the errors, and the checks of the stores
after the run: lost writes (a remembered text not stored, a chat message neither in the
history nor archived), duplicates (a text stored twice), 5xx answers. Targets: 0, 0, 0.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "tests"))
import docs_figures  # noqa: E402

ROUTES = ("health", "remember", "search", "memory", "forget", "chat")
SHARED_EVERY = 5   # every fifth remember sends the text every client sends


class Client(threading.Thread):
    def __init__(self, n: int, base: str, requests: int, deadline: float):
        super().__init__(name=f"client{n}")
        self.n, self.base, self.requests, self.deadline = n, base, requests, deadline
        self.times: dict[str, list[float]] = defaultdict(list)
        self.statuses: Counter[int] = Counter()
        self.errors: list[str] = []
        self.remembered: dict[str, int] = {}     # text -> id, created here or already stored
        self.forgotten: set[str] = set()
        self.said: list[str] = []                 # chat messages answered 200

    def run(self) -> None:
        import httpx

        with httpx.Client(base_url=self.base, timeout=120) as http:
            for i in range(self.requests):
                if time.monotonic() > self.deadline:
                    break
                route = ROUTES[i % len(ROUTES)]
                try:
                    self.one(http, route, i)
                except httpx.HTTPError as e:
                    self.errors.append(f"{route}: {type(e).__name__}: {e}")

    def timed(self, http, route: str, method: str, path: str, **kw):
        start = time.perf_counter()
        r = http.request(method, path, **kw)
        self.times[route].append((time.perf_counter() - start) * 1000)
        self.statuses[r.status_code] += 1
        if r.status_code >= 400:
            self.errors.append(f"{route}: HTTP {r.status_code} {r.text[:120]}")
        return r

    def one(self, http, route: str, i: int) -> None:
        if route == "health":      # the in-run baseline: the guard and uvicorn, no store
            self.timed(http, route, "GET", "/health")
        elif route == "remember":
            shared = (i // len(ROUTES)) % SHARED_EVERY == 0
            text = (f"Shared note {i // len(ROUTES)}: the backup disk is number {i % 7}" if shared
                    else f"Client {self.n} note {i}: the server in rack {i % 5} runs job {i}")
            r = self.timed(http, route, "POST", "/remember", json={"kind": "fact", "content": text})
            if r.status_code == 200:
                self.remembered[text] = r.json()["id"]
        elif route == "search":
            self.timed(http, route, "GET", "/search", params={"q": f"which rack runs job {i}"})
        elif route == "memory":
            params = {"limit": 100} if i % 2 else {"limit": 100, "q": "rack"}
            self.timed(http, route, "GET", "/memory", params=params)
        elif route == "forget":
            own = [t for t in self.remembered if t.startswith(f"Client {self.n} ")
                   and t not in self.forgotten]
            if own:
                r = self.timed(http, route, "DELETE", f"/memory/{self.remembered[own[0]]}")
                if r.status_code == 200:
                    self.forgotten.add(own[0])
        else:
            message = f"Client {self.n} says hello number {i}"
            r = self.timed(http, route, "POST", "/chat", json={"message": message})
            if r.status_code == 200:
                self.said.append(message)


def cron(env: dict, stop: threading.Event, every: float, runs: list[str]) -> None:
    forge = str(Path(sys.executable).parent / "forge")
    while not stop.wait(every):
        done = subprocess.run([forge, "compact", "--json"], env=env, capture_output=True, text=True)
        if done.returncode != 0:
            runs.append(f"compact exit {done.returncode}: {done.stderr.strip()[:200]}")
        else:
            runs.append("archived " + str(len(json.loads(done.stdout).get("removed_ids") or [])))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def check_stores(env: dict, clients: list[Client]) -> dict:
    from forge.store import history, rag
    from forge.core.settings import load_settings

    settings = load_settings(env)
    with rag.open_store(settings, mode="rows") as store:
        entries = rag.list_entries(store)
    contents = Counter(e.content for e in entries if e.kind != "archive")
    archived = " ".join(e.content for e in entries if e.kind == "archive")
    kept = " ".join(m.content for m in history.read(settings.memory_file).messages)
    forgotten = set().union(*(c.forgotten for c in clients))
    remembered = set().union(*(c.remembered for c in clients))
    said = [m for c in clients for m in c.said]
    lost = [t for t in remembered - forgotten if contents[t] != 1]
    lost += [m for m in said if m not in kept and m not in archived]
    return {"lost": lost, "duplicates": [t for t, n in contents.items() if n > 1],
            "resurrected": [t for t in forgotten if contents[t]],
            "remembered": len(remembered), "forgotten": len(forgotten), "chat_turns": len(said)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=60, help="per client, at most")
    parser.add_argument("--seconds", type=float, default=120, help="for the whole run, at most")
    parser.add_argument("--entries", type=int, default=200)
    parser.add_argument("--compact-every", type=float, default=3.0)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    import httpx
    from chat_helpers import envelope
    from fakeserver import FakeServer

    forge = str(Path(sys.executable).parent / "forge")
    with tempfile.TemporaryDirectory() as tmp, FakeServer() as chat:
        chat.chat_reply(envelope("chat", content="Noted."), times=None)
        env = {**os.environ, "FORGE_DATA_DIR": tmp, "LLAMA_CPP_URL": chat.url,
               "SERVE_RATE_LIMIT": "0", "SERVE_MODEL_RATE_LIMIT": "0",
               "COMPACTION_THRESHOLD": "8", "COMPACTION_KEEP_RECENT": "4",
               "MEMORY_MAX_HISTORY": "100000"}
        lines = "\n".join(json.dumps({"kind": "fact", "content": f"Seed fact {i}: disk {i % 7} "
                                      f"holds backup set {i}"}) for i in range(args.entries))
        subprocess.run([forge, "remember", "--batch", "-"], input=lines.encode(), env=env,
                       check=True, capture_output=True)
        port = free_port()
        server = subprocess.Popen([forge, "serve", "--port", str(port)], env=env,
                                  stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        stop, runs = threading.Event(), []
        try:
            for _ in range(200):
                try:
                    httpx.get(base + "/health", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            started = time.monotonic()
            clients = [Client(n, base, args.requests, started + args.seconds)
                       for n in range(args.clients)]
            compactor = threading.Thread(target=cron, args=(env, stop, args.compact_every, runs))
            compactor.start()
            for c in clients:
                c.start()
            for c in clients:
                c.join()
            elapsed = time.monotonic() - started
        finally:
            stop.set()
            server.terminate()
            server.wait(timeout=30)
        compactor.join()
        checks = check_stores(env, clients)
    report(args, clients, elapsed, runs, checks)


def report(args, clients: list[Client], elapsed: float, runs: list[str], checks: dict) -> None:
    with docs_figures.tee("serve_load", args.write_docs):
        total = sum(len(t) for c in clients for t in c.times.values())
        statuses = sum((c.statuses for c in clients), Counter())
        print(f"{args.clients} clients, {args.entries} seed entries, at most {args.requests} "
              f"requests each and {args.seconds:g} s; forge compact every {args.compact_every:g} s; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"{total} requests in {elapsed:.1f} s: {total / elapsed:.1f} requests/s; "
              f"statuses {dict(sorted(statuses.items()))}")
        print(f"{'route':<10} {'n':>5} {'p50 ms':>9} {'p99 ms':>9} {'x health':>9}")
        baseline = None
        for route in ROUTES:
            times = sorted(t for c in clients for t in c.times[route])
            if times:
                p50 = statistics.median(times)
                baseline = baseline or p50
                p99 = times[min(len(times) - 1, int(len(times) * 0.99))]
                print(f"{route:<10} {len(times):>5} {p50:>9.1f} {p99:>9.1f} {p50 / baseline:>9.1f}")
        compactions = [r for r in runs if r.startswith("archived")]
        print(f"forge compact: {len(runs)} runs, {sum(r != 'archived 0' for r in compactions)} "
              f"archived something, {len(runs) - len(compactions)} failed")
        errors = [e for c in clients for e in c.errors]
        print(f"remembered {checks['remembered']} texts ({checks['forgotten']} forgotten), "
              f"{checks['chat_turns']} chat turns")
        print(f"lost writes {len(checks['lost'])}, duplicates {len(checks['duplicates'])}, "
              f"forgotten but stored {len(checks['resurrected'])}, 5xx "
              f"{sum(n for s, n in statuses.items() if s >= 500)}, errors {len(errors)}")
        for line in (errors + checks["lost"] + checks["duplicates"] + [r for r in runs
                                                                        if not r.startswith("archived")])[:10]:
            print("  " + line)


if __name__ == "__main__":
    main()
