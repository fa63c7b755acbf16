"""How many tests of one marker ran, passed, failed or were skipped: the line the `llama` and
`postgres` plugins (tests/servers.py, tests/postgres_server.py) print at the end of a session,
so a run that silently skipped the real-server tests shows it."""
from __future__ import annotations


class MarkerTally:
    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.ids: set[str] = set()
        self.outcomes: dict[str, str] = {}

    def collected(self, session) -> None:
        # session.items is the final selection, after -k / -m deselection
        self.ids.update(item.nodeid for item in session.items if item.get_closest_marker(self.marker))

    def report(self, report) -> None:
        if report.nodeid not in self.ids:
            return
        if report.failed:
            self.outcomes[report.nodeid] = "failed"
        elif report.skipped and self.outcomes.get(report.nodeid) != "failed":
            self.outcomes[report.nodeid] = "skipped"
        elif report.when == "call" and report.passed:
            self.outcomes.setdefault(report.nodeid, "passed")

    def summary(self, label: str) -> str | None:
        """`LABEL tests: N ran (…)`, or None when no test of the marker was selected."""
        if not self.ids:
            return None
        counts = {k: sum(1 for v in self.outcomes.values() if v == k)
                  for k in ("passed", "failed", "skipped")}
        ran = counts["passed"] + counts["failed"]
        return (f"{label} tests: {ran} ran ({counts['passed']} passed, {counts['failed']} failed), "
                f"{counts['skipped']} skipped, of {len(self.ids)} selected")
