"""`forge serve` on a real server process: what each route costs, and what 4 clients and a
`forge compact` cron job do to it.

    python bench/serve_load.py --routes [--requests 50] [--entries 200] [--write-docs]
    python bench/serve_load.py [--clients 4] [--requests 60] [--seconds 120] [--entries 200]
                               [--write-docs]

Both serve a scratch folder of `--entries` memories; each median is also a ratio to /health's
(the in-run baseline). `--routes`: sequential requests per route, one client. Load: `--clients`
threads cycling through ROUTES against a scripted chat server while `forge compact` runs every
3 s; target: no lost write, no duplicate, no 5xx.
"""
from __future__ import annotations

import argparse
import contextlib
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
from typing import Iterator

import harness  # noqa: F401  (the checkout and tests/ on sys.path)
import docs_figures

FORGE = str(Path(sys.executable).parent / "forge")
ROUTES = ("health", "remember", "search", "memory", "forget", "chat")
SHARED_EVERY = 5   # every fifth remember sends the text every client sends
COMPACT_EVERY = 3.0
EACH_ROUTE = [("GET", "/health"), ("GET", "/status"), ("GET", "/context"), ("GET", "/memory"),
              ("GET", "/memory?q=disk+3"), ("GET", "/memory?limit=1000"),
              ("GET", "/memory/export"), ("GET", "/history"), ("GET", "/traces?n=10"),
              ("GET", "/search?q=which+disk+holds+the+backups"), ("POST", "/remember")]


def percentile(times: list[float], share: float) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


@contextlib.contextmanager
def serving(folder: str, chat_url: str, seed: list[str], **env: str) -> Iterator[tuple[str, dict]]:
    """`forge serve` on a free port over `folder`, `seed` remembered first: (its base URL, its
    environment), the server stopped after the block. No rate limit."""
    import httpx

    env = {**os.environ, "FORGE_DATA_DIR": folder, "LLAMA_CPP_URL": chat_url,
           "SERVE_RATE_LIMIT": "0", "SERVE_MODEL_RATE_LIMIT": "0", **env}
    lines = "\n".join(json.dumps({"kind": "fact", "content": text}) for text in seed)
    subprocess.run([FORGE, "remember", "--batch", "-"], input=lines.encode(), env=env,
                   check=True, capture_output=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([FORGE, "serve", "--port", str(port)], env=env,
                              stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                httpx.get(base + "/health", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        yield base, env
    finally:
        server.terminate()
        server.wait(timeout=30)


def routes(args: argparse.Namespace) -> None:
    """Each route of EACH_ROUTE, `--requests` times in a row, one client."""
    import httpx

    seed = [f"Fact number {i}: disk {i % 7} holds backup set {i}" for i in range(args.entries)]
    with tempfile.TemporaryDirectory() as tmp, \
            serving(tmp, "http://127.0.0.1:9", seed) as (base, _), \
            docs_figures.tee("serve_load-routes", args.write_docs), \
            httpx.Client(base_url=base, timeout=60) as http:
        print(f"{args.entries} entries, {args.requests} requests per route, one client; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"{'route':<44} {'p50 ms':>8} {'p95 ms':>8} {'x health':>9} {'bytes':>9}")
        baseline = None
        for method, path in EACH_ROUTE:
            times, size = [], 0
            for n in range(args.requests):
                payload = {"content": f"new note {n} {time.time()}"} if method == "POST" else None
                start = time.perf_counter()
                r = http.request(method, path, json=payload)
                times.append((time.perf_counter() - start) * 1000)
                r.raise_for_status()
                size = len(r.content)
            p50 = statistics.median(times)
            baseline = baseline or p50
            print(f"{method + ' ' + path:<44} {p50:>8.1f} {percentile(times, 0.95):>8.1f} "
                  f"{p50 / baseline:>9.1f} {size:>9}")


class Client(threading.Thread):
    """One client: `requests` requests cycling through ROUTES until `deadline`, what it wrote
    (and forgot, and said) kept for the check."""

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
                # 409 "done, but FILE could not be rewritten": forgotten, its old bytes left to
                # the next erase (a reader held an older snapshot)
                if r.status_code == 200 or r.text.startswith('{"error":"done, but'):
                    self.forgotten.add(own[0])
        else:
            message = f"Client {self.n} says hello number {i}"
            r = self.timed(http, route, "POST", "/chat", json={"message": message})
            if r.status_code == 200:
                self.said.append(message)


def cron(env: dict, stop: threading.Event, runs: list[str]) -> None:
    """`forge compact --json` every COMPACT_EVERY s until `stop`; each run's outcome."""
    while not stop.wait(COMPACT_EVERY):
        done = subprocess.run([FORGE, "compact", "--json"], env=env, capture_output=True, text=True)
        if done.returncode:
            runs.append(f"compact exit {done.returncode}: {done.stderr.strip()[:200]}")
        else:
            runs.append(f"archived {len(json.loads(done.stdout).get('removed_ids') or [])}")


def check_stores(env: dict, clients: list[Client]) -> dict:
    """What the clients were told was stored against what the store and history hold."""
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


def load(args: argparse.Namespace) -> None:
    from chat_helpers import envelope
    from fakeserver import FakeServer

    seed = [f"Seed fact {i}: disk {i % 7} holds backup set {i}" for i in range(args.entries)]
    stop, runs = threading.Event(), []
    with tempfile.TemporaryDirectory() as tmp, FakeServer() as chat:
        chat.chat_reply(envelope("chat", content="Noted."), times=None)
        with serving(tmp, chat.url, seed, COMPACTION_THRESHOLD="8", COMPACTION_KEEP_RECENT="4",
                     MEMORY_MAX_HISTORY="100000") as (base, env):
            started = time.monotonic()
            clients = [Client(n, base, args.requests, started + args.seconds)
                       for n in range(args.clients)]
            compactor = threading.Thread(target=cron, args=(env, stop, runs))
            try:
                compactor.start()
                for c in clients:
                    c.start()
                for c in clients:
                    c.join()
                elapsed = time.monotonic() - started
            finally:
                stop.set()
        compactor.join()
        checks = check_stores(env, clients)
    with docs_figures.tee("serve_load", args.write_docs):
        total = sum(len(t) for c in clients for t in c.times.values())
        statuses = sum((c.statuses for c in clients), Counter())
        print(f"{args.clients} clients, {args.entries} seed entries, at most {args.requests} "
              f"requests each and {args.seconds:g} s; forge compact every {COMPACT_EVERY:g} s; "
              f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"{total} requests in {elapsed:.1f} s: {total / elapsed:.1f} requests/s; "
              f"statuses {dict(sorted(statuses.items()))}")
        print(f"{'route':<10} {'n':>5} {'p50 ms':>9} {'p99 ms':>9} {'x health':>9}")
        baseline = None
        for route in ROUTES:
            times = [t for c in clients for t in c.times[route]]
            if times:
                p50 = statistics.median(times)
                baseline = baseline or p50
                print(f"{route:<10} {len(times):>5} {p50:>9.1f} {percentile(times, 0.99):>9.1f} "
                      f"{p50 / baseline:>9.1f}")
        compactions = [r for r in runs if r.startswith("archived")]
        print(f"forge compact: {len(runs)} runs, {sum(r != 'archived 0' for r in compactions)} "
              f"archived something, {len(runs) - len(compactions)} failed")
        errors = [e for c in clients for e in c.errors]
        print(f"remembered {checks['remembered']} texts ({checks['forgotten']} forgotten), "
              f"{checks['chat_turns']} chat turns")
        print(f"lost writes {len(checks['lost'])}, duplicates {len(checks['duplicates'])}, "
              f"forgotten but stored {len(checks['resurrected'])}, 5xx "
              f"{sum(n for s, n in statuses.items() if s >= 500)}, errors {len(errors)}")
        failed = [r for r in runs if not r.startswith("archived")]
        for line in (errors + checks["lost"] + checks["duplicates"] + failed)[:10]:
            print("  " + line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", action="store_true",
                        help="each route in turn, one client (no load, no chat)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, help="per client, at most (default 60; "
                        "--routes: per route, default 50)")
    parser.add_argument("--seconds", type=float, default=120, help="for the whole run, at most")
    parser.add_argument("--entries", type=int, default=200)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    args.requests = args.requests or (50 if args.routes else 60)
    (routes if args.routes else load)(args)


if __name__ == "__main__":
    main()
