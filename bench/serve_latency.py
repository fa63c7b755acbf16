"""What a request to `forge serve` costs, route by route, on a real server process.

    python bench/serve_latency.py [--requests 50] [--entries 200] [--write-docs]

Starts `forge serve` (uvicorn) on a free loopback port over a scratch data folder holding
`--entries` deliberate memories (embedded model) and a short history, then times `--requests`
sequential requests per route with one keep-alive client and prints median and 95th percentile
in milliseconds, each median also as a ratio to /health's (the in-run baseline: the guard and
uvicorn, no store), and the size of each answer. `/memory` is one page (100 entries); the
whole store is `/memory/export`. No chat server: /chat is not timed (its cost is the model's).
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import docs_figures  # noqa: E402

ROUTES = [("GET", "/health", None), ("GET", "/status", None), ("GET", "/context", None),
          ("GET", "/memory", None), ("GET", "/memory?q=disk+3", None),
          ("GET", "/memory?limit=1000", None), ("GET", "/memory/export", None),
          ("GET", "/history", None), ("GET", "/traces?n=10", None),
          ("GET", "/search?q=which+disk+holds+the+backups", None),
          ("POST", "/remember", "remember")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=50)
    parser.add_argument("--entries", type=int, default=200)
    parser.add_argument("--write-docs", action="store_true", help=docs_figures.HELP)
    args = parser.parse_args()
    import httpx

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "FORGE_DATA_DIR": tmp, "LLAMA_CPP_URL": "http://127.0.0.1:9",
               "SERVE_RATE_LIMIT": "0", "SERVE_MODEL_RATE_LIMIT": "0"}
        forge = str(Path(sys.executable).parent / "forge")
        lines = "\n".join(f'{{"kind": "fact", "content": "Fact number {i}: disk {i % 7} holds '
                          f'backup set {i}"}}' for i in range(args.entries))
        subprocess.run([forge, "remember", "--batch", "-"], input=lines.encode(), env=env,
                       check=True, capture_output=True)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = subprocess.Popen([forge, "serve", "--port", str(port)], env=env,
                                  stderr=subprocess.DEVNULL)
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(100):
                try:
                    httpx.get(base + "/health", timeout=1)
                    break
                except httpx.HTTPError:
                    time.sleep(0.1)
            with docs_figures.tee("serve_latency", args.write_docs):
                print(f"{args.entries} entries, {args.requests} requests per route, one client; "
                      f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
                print(f"{'route':<44} {'p50 ms':>8} {'p95 ms':>8} {'x health':>9} {'bytes':>9}")
                with httpx.Client(base_url=base, timeout=60) as http:
                    baseline = None
                    for method, path, body in ROUTES:
                        times, size = [], 0
                        for n in range(args.requests):
                            payload = {"content": f"new note {n} {time.time()}"} if body else None
                            start = time.perf_counter()
                            r = http.request(method, path, json=payload)
                            times.append((time.perf_counter() - start) * 1000)
                            r.raise_for_status()
                            size = len(r.content)
                        times.sort()
                        p50 = statistics.median(times)
                        baseline = baseline or p50
                        p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
                        print(f"{method + ' ' + path:<44} {p50:>8.1f} {p95:>8.1f} "
                              f"{p50 / baseline:>9.1f} {size:>9}")
        finally:
            server.terminate()
            server.wait(timeout=10)


if __name__ == "__main__":
    main()
