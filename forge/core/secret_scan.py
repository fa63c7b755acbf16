"""Secrets found in a text and replaced by a marker naming their type, before any write.

The scanner is detect-secrets (Yelp's, chosen on the labelled set: docs/secrets.md), configured
here rather than rewritten: which of its plugins run, which of its filters, the file type its
keyword plugin reads a line as (a configuration file: `password: x` and `PASSWORD=x` need no
quotes), and Forge's own plugins and filters (forge/core/secret_rules.py), loaded through its
plugin mechanism. Its verification step (a request to the provider) is never configured: a scan
sends nothing anywhere.

Around the library, three things a line scanner cannot do: a private key is redacted from its
BEGIN line to its END line (the library flags the BEGIN line only), a token found inside a
longer run of token characters is redacted whole (a Stripe key of 99 characters, matched on its
first 32), and overlapping finds become one marker, the most specific type's.

`could_hold(text)` is the cheap test first: a text with no long run of token characters, no
`://` and none of the words the plugins key on cannot hold a secret they find, and the library
(~90 ms of imports, most of it `requests`) is not loaded for it.
"""
from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any, Iterable, NamedTuple

MARKER = "[secret: {}]"

# detect-secrets' own plugins Forge runs, and the type each one's marker names.
PLUGINS: dict[str, str] = {
    "AWSKeyDetector": "AWS access key",
    "AzureStorageKeyDetector": "Azure storage key",
    "BasicAuthDetector": "password in URL",
    "CloudantDetector": "Cloudant credentials",
    "DiscordBotTokenDetector": "Discord bot token",
    "GitHubTokenDetector": "GitHub token",
    "GitLabTokenDetector": "GitLab token",
    "IbmCloudIamDetector": "IBM Cloud key",
    "IbmCosHmacDetector": "IBM COS key",
    "JwtTokenDetector": "JSON web token",
    "KeywordDetector": "secret key",   # "password" or "private key" when its key says so
    "MailchimpDetector": "Mailchimp key",
    "NpmDetector": "npm token",
    "OpenAIDetector": "OpenAI key",
    "PrivateKeyDetector": "private key",
    "PypiTokenDetector": "PyPI token",
    "SendGridDetector": "SendGrid key",
    "SlackDetector": "Slack token",
    "SoftlayerDetector": "SoftLayer key",
    "SquareOAuthDetector": "Square OAuth secret",
    "StripeDetector": "Stripe key",
    "TelegramBotTokenDetector": "Telegram bot token",
    "TwilioKeyDetector": "Twilio key",
}
# Left out, and why: Base64HighEntropyString and HexHighEntropyString flag git commits, UUIDs,
# checksums, image digests and long words (every look-alike of the labelled set, measured);
# IPPublicDetector flags addresses, which are not secrets; ArtifactoryDetector matches any
# 11-character word starting with AP and a hex digit (`APB1234567`).

# Forge's plugins (forge/core/secret_rules.py) and their types.
OWN_PLUGINS: dict[str, str] = {
    "ProsePasswordDetector": "password",
    "URLPasswordDetector": "password in URL",
    "KeyedTokenDetector": "token",
    "AnthropicKeyDetector": "Anthropic key",
    "OpenAIProjectKeyDetector": "OpenAI key",
    "GoogleApiKeyDetector": "Google API key",
    "HuggingFaceTokenDetector": "Hugging Face token",
    "GitHubFineGrainedTokenDetector": "GitHub token",
    "AWSSecretKeyDetector": "AWS secret key",
}

# One made-up example of each type, pasted as people paste it: docs/secrets.md's table of what
# is detected is built from it (with what Forge stores instead), and tests/test_secrets.py
# checks that each is found whole, as that type, and nothing else.
EXAMPLES: dict[str, str] = {
    "AWS access key": "aws id AKIAUJZDEGXDNCF32EPF",
    "AWS secret key": "AKIAEJRZQADW47PKACDB / ZxEuhnbzs0z1wNiMg9aW37k5wCnHDepQHgI3HLBk",
    "Anthropic key": "-H \"x-api-key: sk-ant-api03-2hpChYgCfrL1spNxnyVmihA_2O76UMFxFkM_R5Kjp1vRt-1fjORS_6ilI8ihN5KXSc7Tvo_hBKqFYY_kv5ZJr3J1TWDtkAA\"",
    "Azure storage key": "AccountKey=wtDDb+xHKas1VOqg6YYZYn9ZhyiA4uoRgnatmUdjAWtGSU8po+799NksnRH9ucAUsdMlHUvTCQCyEZDz/TddJ8==",
    "Cloudant credentials": "cloudant_password='86bebb2737f6a6f0fb23c6f5da2cec255404e4fb440034d6608697a8d41bed44'",
    "Discord bot token": "discord: MTHGb3CXlMaXZjljENUhJduR.9nhFyJ.fm5di4PzJ59FHz5r1pY4OjE2jBM",
    "GitHub token": "my token ghp_Yh5Xj8TPQxjq4i9DoV8gz4FkQ1okTBGzvAmw",
    "GitLab token": "GITLAB_TOKEN=glpat-OlUcR64cXQLioDnkHIfx",
    "Google API key": "maps key AIzaIq2HZt_PlJhx2jIclHkCiHp6bR1IqfEouHg",
    "Hugging Face token": "huggingface-cli login --token hf_lm7tOtHWnsCGRlrwZbqcabUGJmGEp7CgQ0",
    "IBM Cloud key": "ibm_cloud_iam_api_key = '3_YNBDRzrZSgqbjG3uhkWKFLf6xuI5aHUQPFeNBTxaQW'",
    "IBM COS key": "ibm_cos_secret_access_key: '2f86702824c1c099724caf4941d4072014b3ce107f80e222'",
    "JSON web token": "Authorization: Bearer eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiI0MiJ9.8GjHEAD6_Wj9KfzjsQGMrb9h-ImB-LK777pzNk8cL6j",
    "Mailchimp key": "mailchimp e8c662248b483b7ffc050fec94dbca3a-us6",
    "npm token": "//registry.npmjs.org/:_authToken=npm_auWv1zh87mTa5Vsqxezy3Lex7BWr2drgd1Qs",
    "OpenAI key": "OPENAI_API_KEY=sk-proj-tFI3OyV2dZAkg05rK-gqv81RKMGHZEM9YpvujA_C5Q52ryFlT3BlbkFJwRlOEVHzc0X0AWIRh_JUqBlIFXZ53Ncqe28-ajY75FnCttn6",
    "password": "le mot de passe du wifi est Soleil-1800",
    "password in URL": "postgres://app:YioK6cPTt9#@db.lan/app",
    "private key": "-----BEGIN OPENSSH PRIVATE KEY-----\nqG3omjMyXHCabM6JOF8EFd0Nhcy/1kGD2VD/eR1UYzaLiA/zNyD7CHLn/xC+1hsY\n-----END OPENSSH PRIVATE KEY-----",
    "PyPI token": "pypi-AgEIcHlwaS5vcmcgBds1ghxY5OokvQyx7eNWVQ4vnakJkS1pAWTN3lg8zV5yPU8d0FZfWe7ihGyiRUIQfHOJM",
    "secret key": "API_KEY=aUWM6ZO88eb0ogET9D9XyYq6B0Fi7Fla",
    "SendGrid key": "SENDGRID=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",
    "Slack token": "the bot posts with xoxb-504310399315-8279401995305-vjcnqcMUP6n0a0uARxlNtenc",
    "SoftLayer key": "softlayer_api_key = 'ff2d3c425c8d99d19bdd0b6cc60d5d32cbe54014c2b54b95523cf6941fa1c257'",
    "Square OAuth secret": "square sq0csp-Zz8xBfZuXTptFyfePpX6N1NF2XV54wca-7E56w8Zniq",
    "Stripe key": "stripe sk_live_wBxfZCGGQccOif7UuXUGfdWG",
    "Telegram bot token": "bot 6201913274:AAvCiSGuPJ6sG9AHEOVezxZuJPWvHogU5nG",
    "token": "VAULT_TOKEN=hvs.IO2zVZxqyxKjxvWfColNV9ds0HqtO93L7Q5uUaVc",
    "Twilio key": "twilio SK749ddb14f71010b93b7d946bf54074e3",
}

# The library's filters Forge keeps (each drops a find), and its own. Left out: the allowlist
# comment (`pragma: allowlist secret`, for code), is_likely_id_string (it drops a keyword's
# value when the line says `id` before it: `user_id: bob password: x`), the file-type filters,
# and the gibberish and wordlist filters (their packages are not installed).
FILTERS = (
    "detect_secrets.filters.heuristic.is_sequential_string",
    "detect_secrets.filters.heuristic.is_potential_uuid",
    "detect_secrets.filters.heuristic.is_templated_secret",
    "detect_secrets.filters.heuristic.is_prefixed_with_dollar_sign",
    "detect_secrets.filters.heuristic.is_not_alphanumeric_string",
    "detect_secrets.filters.heuristic.is_indirect_reference",
    "forge.core.secret_rules.is_plain_value",
)

# The filters that drop a value for having no letter or for reading as a number (`*****`,
# `TIMEOUT=6000`): a PIN or a door code that a sentence names as one (`my PIN is 8362`) is
# digits, so they do not apply to the prose plugin's finds, which name their kind.
DIGITS_ALLOWED = {"ProsePasswordDetector": ("detect_secrets.filters.heuristic.is_not_alphanumeric_string",
                                            "forge.core.secret_rules.is_plain_value")}

# A line is read as a configuration file: the keyword plugin then finds `password: x`,
# `password = x` and `PASSWORD=x` without quotes.
FILENAME = "message.conf"

# Types a keyword or a sentence gives: a provider's own type wins over them on the same span.
GENERIC = frozenset({"password", "secret key", "token"})

# The pre-filter: what every plugin above needs to find anything (a token of 16 characters or
# more; a URL's `://`; the words the keyword, prose, token, private-key and provider plugins key
# on). tests/test_secrets.py holds it to every type's example and the labelled set.
_COULD_HOLD = re.compile(
    r"[A-Za-z0-9+/=_.~-]{16,}|://|"
    r"(?i:key|pass|pwd|mdp|secr|token|jeton|bearer|cred|auth|cookie|code|clé|\bpin\b|combina|"
    r"xox|contrase|cloudant|softlayer|ibm)")

# A long line (a minified file, a log pasted whole) is scanned in windows that overlap by more
# than any token is long: some of the library's regexes take quadratic time on a long line
# (its npm plugin's `//.+/:_authToken`), a window bounds them.
WINDOW, OVERLAP = 4096, 512

# What Forge writes in place of a secret: a value found where one stands was read from the
# marker's own words, and is no secret (a text redacted once is never redacted again, and
# `memory scan` finds nothing in it).
MARKER_RE = re.compile(r"\[secret: [^\]\n]{1,40}\]")

_TOKEN_CHARS = re.compile(r"[A-Za-z0-9_-]")
_PEM_END = re.compile(r"-----END [^\n]*?-----|---- END SSH2 ENCRYPTED PRIVATE KEY ----")
_QUOTES = "\"'`"


class Found(NamedTuple):
    """One secret in a text: its type and where it is."""

    label: str
    start: int
    end: int


def could_hold(text: str) -> bool:
    """False when `text` cannot hold anything the scanner finds (no library load, no scan)."""
    return bool(_COULD_HOLD.search(text))


def find(text: str) -> list[Found]:
    """The secrets in `text`, in order, none overlapping."""
    if not text or not could_hold(text):
        return []
    plugins, filters = _engine()
    spans: list[Found] = []
    offset = 0
    for number, raw in enumerate(text.splitlines(keepends=True), 1):
        line = raw.rstrip("\r\n")
        for start in range(0, max(len(line), 1), WINDOW - OVERLAP):
            piece = line[start:start + WINDOW]
            if piece.strip() and could_hold(piece):
                spans += _scan_line(text, piece, offset + start, number, plugins, filters)
            if start + WINDOW >= len(line):
                break
        offset += len(raw)
    return _merge(spans)


def redact(text: str) -> tuple[str, list[str]]:
    """`text` with every secret replaced by its marker, and the types replaced, in order."""
    found = find(text)
    if not found:
        return text, []
    parts: list[str] = []
    last = 0
    for f in found:
        parts += [text[last:f.start], MARKER.format(f.label)]
        last = f.end
    parts.append(text[last:])
    return "".join(parts), [f.label for f in found]


def prepare(texts: Iterable[str]) -> None:
    """Load the library now when one of `texts` may hold a secret: a writer calls it before it
    takes its lock, so the load (~90 ms) never holds other processes up."""
    if any(text and could_hold(text) for text in texts):
        _engine()


def labels() -> dict[str, str]:
    """Every plugin Forge runs -> the type its markers name (the docs' table)."""
    return {**PLUGINS, **OWN_PLUGINS}


# -- the tally a write carries back to its command ------------------------------------------------

class Redactions:
    """What the writes of one command redacted, by type; `keep` (FORGE_KEEP_SECRETS) turns the
    scan off. `text()` is the one call a store writer makes on a text before it writes it."""

    __slots__ = ("keep", "counts")

    def __init__(self, keep: bool = False, counts: dict[str, int] | None = None) -> None:
        self.keep = keep
        self.counts: dict[str, int] = {} if counts is None else counts   # shared, not copied

    @classmethod
    def for_settings(cls, settings: Any, counts: dict[str, int] | None = None) -> "Redactions":
        """The tally of a command run under `settings` (FORGE_KEEP_SECRETS), counting into
        `counts` when given (a report's own field)."""
        return cls(keep=bool(getattr(settings, "keep_secrets", False)), counts=counts)

    def text(self, text: str) -> str:
        if self.keep or not text:
            return text
        cleaned, found = redact(text)
        self.add(found)
        return cleaned

    def value(self, value: Any) -> Any:
        """A JSON value (an entry's refs) with `text()` applied to every string in it."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            return {k: self.value(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        return value

    def add(self, found: Iterable[str]) -> None:
        for label in found:
            self.counts[label] = self.counts.get(label, 0) + 1

    def merge(self, other: "Redactions | dict[str, int] | None") -> "Redactions":
        counts = other.counts if isinstance(other, Redactions) else (other or {})
        for label, n in counts.items():
            self.counts[label] = self.counts.get(label, 0) + n
        return self

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, int]:
        """The --json field `secrets_redacted`: type -> count ({} when none)."""
        return dict(sorted(self.counts.items()))

    def note(self) -> str | None:
        """The stderr line: `1 secret redacted (AWS access key)`; None when nothing was."""
        return describe(self.counts)


def describe(counts: dict[str, int], verb: str = "redacted") -> str | None:
    """`3 secrets redacted (AWS access key, password ×2)` from type -> count; None for none."""
    total = sum(counts.values())
    if not total:
        return None
    kinds = ", ".join(label if n == 1 else f"{label} ×{n}" for label, n in sorted(counts.items()))
    return f"{total} secret{'s' if total != 1 else ''}{' ' + verb if verb else ''} ({kinds})"


# -- the library ----------------------------------------------------------------------------------

_LOCK = threading.Lock()
_ENGINE: tuple[list[tuple[Any, str]], list[Any]] | None = None


def _engine() -> tuple[list[tuple[Any, str]], list[Any]]:
    """detect-secrets configured once per process: (plugin, type) pairs and filter functions."""
    global _ENGINE
    if _ENGINE is not None:
        return _ENGINE
    with _LOCK:
        if _ENGINE is None:
            from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class
            from detect_secrets.settings import get_filters, get_plugins, get_settings

            rules = Path(__file__).with_name("secret_rules.py")
            settings = get_settings()
            settings.configure_plugins(
                [{"name": name} for name in PLUGINS]
                + [{"name": name, "path": f"file://{rules}"} for name in OWN_PLUGINS])
            settings.configure_filters([{"path": path} for path in FILTERS])
            get_mapping_from_secret_type_to_class.cache_clear()  # sees the plugins of this file
            known = labels()
            plugins = [(p, known[type(p).__name__]) for p in get_plugins()]
            filters = [f for f in get_filters() if getattr(f, "path", "") in FILTERS]
            _ENGINE = (plugins, filters)
    return _ENGINE


def _filtered(filters: list[Any], secret: str, plugin: Any, line: str) -> bool:
    from detect_secrets.util.inject import call_function_with_arguments

    return any(call_function_with_arguments(f, secret=secret, plugin=plugin, line=line,
                                            filename=FILENAME) for f in filters)


def _scan_line(text: str, line: str, offset: int, number: int,
               plugins: list[tuple[Any, str]], filters: list[Any]) -> list[Found]:
    out: list[Found] = []
    markers = [m.span() for m in MARKER_RE.finditer(line)]
    for plugin, label in plugins:
        name = type(plugin).__name__
        values = {s.secret_value.strip() for s in
                  plugin.analyze_line(filename=FILENAME, line=line, line_number=number)
                  if s.secret_value}
        if name == "KeywordDetector":
            values = {_first_word(line, v) for v in values}
        allowed = DIGITS_ALLOWED.get(name, ())
        active = [f for f in filters if getattr(f, "path", "") not in allowed]
        for value in values:
            if not value or _filtered(active, value, plugin, line):
                continue
            found = list(re.finditer(re.escape(value), line))
            if any(m.start() < b and m.end() > a for m in found for a, b in markers):
                continue   # read from a marker's own words: no secret
            for m in found:
                start, end = offset + m.start(), offset + m.end()
                kind = label
                if name == "PrivateKeyDetector":
                    begin = line.rfind("-----", 0, m.start())   # the dashes before BEGIN
                    start = offset + (begin if begin >= 0 else m.start())
                    end_mark = _PEM_END.search(text, end)
                    end = end_mark.end() if end_mark else len(text)
                elif name == "KeywordDetector":
                    kind = _keyword_type(line[:m.start()])
                elif label not in GENERIC and "URL" not in label:
                    start, end = _whole_token(text, start, end)
                out.append(Found(kind, start, end))
    return out


def _first_word(line: str, value: str) -> str:
    """The keyword plugin, reading a configuration line, takes the value to the end of the line;
    in a sentence (`password: hunter2 and the user is bob`) the password is its first word,
    unless it is quoted."""
    at = line.find(value)
    if at > 0 and line[at - 1] in _QUOTES:
        return value
    return value.split()[0] if value.split() else value


def _keyword_type(before: str) -> str:
    """The type of a keyword plugin's find, from the last key before it: a password, a private
    key (WireGuard's `PrivateKey = …`), else a secret key (`API_KEY`, `client_secret`)."""
    key = re.findall(r"(?i)[a-z_ñ-]*(?:pass|pwd|contrase|priv|secret|key)[a-z_ñ-]*", before)
    last = key[-1].lower() if key else ""
    if re.search(r"pass|pwd|contrase", last):
        return "password"
    if "priv" in last:
        return "private key"
    return "secret key"


def _whole_token(text: str, start: int, end: int) -> tuple[int, int]:
    """A token matched on part of a longer run of token characters covers the whole run."""
    while start > 0 and _TOKEN_CHARS.match(text[start - 1]):
        start -= 1
    while end < len(text) and _TOKEN_CHARS.match(text[end]):
        end += 1
    return start, end


def _merge(spans: list[Found]) -> list[Found]:
    """Overlapping finds as one span; its type is the most specific one's (a provider's type
    before a keyword's), the longest find's among equals."""
    merged: list[Found] = []
    for f in sorted(spans, key=lambda f: (f.start, -f.end)):
        if merged and f.start < merged[-1].end:
            last = merged[-1]
            label = last.label
            if last.label in GENERIC and f.label not in GENERIC:
                label = f.label
            merged[-1] = Found(label, last.start, max(last.end, f.end))
        else:
            merged.append(f)
    return merged
