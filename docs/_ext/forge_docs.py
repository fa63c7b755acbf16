"""Sphinx directives that generate the reference tables from the code, so they cannot drift.

    ```{forge-settings}
    ```            the settings table, from forge.core.settings.SPECS (tools/settings_table.py)

    ```{forge-routes}
    ```            the HTTP route table, from forge serve's Starlette routes (their OpenAPI
                   document: the same one GET /openapi.json serves)

    ```{forge-time-expressions}
    ```            the time expressions and the windows forge/core/when.py reads them as
    ```{forge-secret-types}
    ```            the secrets Forge redacts, from forge.core.secret_scan (each type's example
                   run through the scanner: what is stored instead is its answer)
    ```{forge-same-thing}
    ```            the closed lists two notes are compared with, from forge.core.facts (the
                   words read as one in English and French, numbers spelled out, grammar)

Each renders Markdown that MyST then parses as if it were written in the page.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective

ROOT = Path(__file__).resolve().parents[2]


def settings_table() -> str:
    """tools/settings_table.py's table (loaded by path: tools/ is not a package)."""
    spec = importlib.util.spec_from_file_location("settings_table", ROOT / "tools" / "settings_table.py")
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module.table()


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _inputs(operation: dict[str, Any]) -> str:
    """The query parameters and JSON body fields an operation reads, `required` ones marked."""
    names = []
    for param in operation.get("parameters", []):
        mark = " (required)" if param.get("required") else ""
        names.append(f"`{param['name']}`{mark}")
    for media in operation.get("requestBody", {}).get("content", {}).values():
        schema = media.get("schema", {})
        required = set(schema.get("required", []))
        for field in schema.get("properties", {}):
            names.append(f"`{field}`" + (" (required)" if field in required else ""))
    return ", ".join(names)


def route_rows() -> list[tuple[str, str, str, str]]:
    """(method, path, summary and description, inputs) for every route of the application."""
    from forge.serve.app import ROUTES, SCHEMAS

    document = SCHEMAS.get_schema(routes=ROUTES)
    rows = []
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            text = operation.get("summary", "")
            if operation.get("description"):
                text += ". " + operation["description"]
            rows.append((method.upper(), path, text, _inputs(operation)))
    return rows


def route_table() -> str:
    lines = ["| route | what it does (its CLI twin) | reads |", "|---|---|---|"]
    for method, path, text, inputs in route_rows():
        lines.append(f"| `{method} {path}` | {_cell(text)} | {_cell(inputs)} |")
    return "\n".join(lines)


def time_table() -> str:
    """Each expression of when.DOCS_EXAMPLES, read by when.period at DOCS_NOW in DOCS_ZONE, its
    window in local time (the until excluded)."""
    from zoneinfo import ZoneInfo

    from forge.core import when

    zone = ZoneInfo(when.DOCS_ZONE)

    def shown(stamp: str | None, open_side: str) -> str:
        if stamp is None:
            return open_side
        moment = when.datetime.fromisoformat(stamp).astimezone(zone)
        return moment.strftime("%Y-%m-%d %H:%M")

    lines = ["| English | French | since | until (excluded) |", "|---|---|---|---|"]
    for en, fr in when.DOCS_EXAMPLES:
        a = when.period(en, now=when.DOCS_NOW, tz=zone)
        if fr is not None:   # the French reads as the English: the test below says so
            b = when.period(fr, now=when.DOCS_NOW, tz=zone)
            if (a.since, a.until) != (b.since, b.until):
                raise ValueError(f"{en!r} and {fr!r} name different windows")
        lines.append(f"| `{en}` | {f'`{fr}`' if fr else '(the same)'} | "
                     f"{shown(a.since, '(open)')} | {shown(a.until, '(open)')} |")
    return "\n".join(lines)


def secret_types_table() -> str:
    """Each type the scanner names, the plugin that finds it, one example and what is stored."""
    from forge.core import secret_scan

    by_type: dict[str, list[str]] = {}
    for plugin, label in secret_scan.labels().items():
        by_type.setdefault(label, []).append(plugin)
    lines = ["| type | found by | pasted | stored |", "|---|---|---|---|"]
    for label, example in sorted(secret_scan.EXAMPLES.items(), key=lambda kv: kv[0].lower()):
        stored, _ = secret_scan.redact(example)
        plugins = ", ".join(f"`{p}`" + ("" if p in secret_scan.PLUGINS else " (Forge)")
                            for p in by_type.get(label, []))
        lines.append(f"| {label} | {plugins} | `{_cell(example)}` | `{_cell(stored)}` |")
    return "\n".join(lines)


def same_thing_table() -> str:
    """forge.core.facts' closed lists: SAME_THING by the word it reads them as, SPELLED, GRAMMAR,
    KINDS, what is not said first (DETERMINERS, RECURRING), JOINING."""
    from forge.core import facts

    by_word: dict[str, list[str]] = {}
    for word, same in facts.SAME_THING.items():
        by_word.setdefault(same, []).append(word)
    lines = ["| read as | the words (case and accents folded, a final plural `s` dropped) |",
             "|---|---|"]
    lines += [f"| `{same}` | {', '.join(f'`{w}`' for w in sorted(words))} |"
              for same, words in sorted(by_word.items())]
    by_number: dict[int, list[str]] = {}
    for word, number in facts.SPELLED.items():
        by_number.setdefault(int(number), []).append(word)
    lines += ["", "Numbers spelled out, read as digits before a word: " + "; ".join(
        f"{n}: " + ", ".join(f"`{w}`" for w in words) for n, words in sorted(by_number.items())),
        "", "Grammar, not content: " + ", ".join(f"`{w}`" for w in sorted(facts.GRAMMAR))
        + " (`has`, `had` are read as `have`; `is`, `are`, `was`, `were` as `be`)."]
    lines += ["", "A kind and its members: " + "; ".join(
        f"`{kind}`: " + ", ".join(f"`{w}`" for w in sorted(members))
        for kind, members in facts.KINDS.items()) + " (every word is also a kind of itself).",
        "", "Not what a note is about, said first: " + ", ".join(
            f"`{w}`" for w in sorted(facts.DETERMINERS | facts.RECURRING)) + ".",
        "", "A number between a name and one of these words names a model: " + ", ".join(
            f"`{w}`" for w in sorted(facts.JOINING)) + "."]
    return "\n".join(lines)


class _Generated(SphinxDirective):
    has_content = False

    def markdown(self) -> str:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        container = nodes.container()
        source = StringList(self.markdown().split("\n"), source=self.get_source_info()[0])
        self.state.nested_parse(source, self.content_offset, container)
        return container.children


class SettingsTable(_Generated):
    def markdown(self) -> str:
        return settings_table()


class RouteTable(_Generated):
    def markdown(self) -> str:
        return route_table()


class TimeTable(_Generated):
    def markdown(self) -> str:
        return time_table()


class SecretTypesTable(_Generated):
    def markdown(self) -> str:
        return secret_types_table()


class SameThingTable(_Generated):
    def markdown(self) -> str:
        return same_thing_table()


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("forge-secret-types", SecretTypesTable)
    app.add_directive("forge-same-thing", SameThingTable)
    app.add_directive("forge-settings", SettingsTable)
    app.add_directive("forge-routes", RouteTable)
    app.add_directive("forge-time-expressions", TimeTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
