"""Forge's additions to detect-secrets, written in its own extension API: detectors subclass its
`RegexBasedDetector` (loaded by detect-secrets from this file's path, as its custom plugins are)
and filters are plain functions it calls by import path. forge/core/secret_scan.py configures
both; this file imports nothing of Forge, since detect-secrets loads it by path.

Each rule is here because the labelled set (bench/secrets_set.json) measured a miss or a false
alarm of detect-secrets' own plugins without it; the prose rule was made general after a held-out
set of sentences (bench/secrets_prose_heldout.json) measured what it missed; what both sets lose
when each rule is left out is a row of docs/benchmarks.md's "Tried, not shipped".
"""
from __future__ import annotations

import re
from typing import Generator

from detect_secrets.plugins.base import RegexBasedDetector

# A value that follows "password is", "mot de passe :" and so on: a quoted phrase, or one run of
# non-blank characters; trailing sentence punctuation is not part of it.
_QUOTED = r"[\"'“«‘][^\S\n]*(?P<quoted>[^\"'”»’\n]{4,100}?)[^\S\n]*[\"'”»’]"
_BARE = r"(?P<bare>[^\s\"'“«‘][^\s]{3,199})"
_GAP = r"[^\S\n]"


def looks_like_password(value: str) -> bool:
    """A bare word after "password is" is a password only when no dictionary word looks like
    it: six characters or more, and a digit, a symbol or a capital after the first letter.
    ("the password is on the sticker", "le mot de passe est dans le gestionnaire" name none.)"""
    if len(value) < 6 or value.startswith("[secret:"):
        return False
    return any(c.isdigit() or not c.isalnum() for c in value) or \
        any(c.isupper() for c in value[1:])


class _ValueDetector(RegexBasedDetector):
    """A detector whose regexes capture the value in a group named `quoted` or `bare`."""

    secret_type = ""  # abstract: the subclasses name their type
    denylist: tuple = ()

    def analyze_string(self, string: str) -> Generator[str, None, None]:
        for regex in self.denylist:
            for m in regex.finditer(string):
                value = m.groupdict().get("quoted")
                if value:
                    yield value.strip()
                    continue
                value = (m.groupdict().get("bare") or "").rstrip(".,;:)»”’")
                if self.accept(value):
                    yield value

    def accept(self, value: str) -> bool:
        return looks_like_password(value)


# What a sentence names before it gives a secret, in English and French. A password's kind
# names one outright; a code's names one whose value may be a few digits (a PIN, a door code);
# a plain "code" or "key" names one only beside what it opens (a door, an alarm, the Wi-Fi).
_PASSWORD_KINDS = (
    r"passwords?|passwd|pwd|pass(?:[^\S\n]?phrase)?|wi-?fi[^\S\n]+key"
    r"|mots?[^\S\n]+de[^\S\n]+passe|mdp|phrase[^\S\n]+(?:de[^\S\n]+passe|secrète)")
# A token's kind: what a machine generates, so its value must read as one (looks_like_token):
# "the secret of the recipe is Grandma's butter" gives none.
_TOKEN_KINDS = (
    r"api[^\S\n]?key|access[^\S\n]+key|secret|token|jeton(?:[^\S\n]+d['’]api)?"
    r"|clé[^\S\n]+(?:d['’])?api")
# "pin" is a noun only after a determiner ("my pin is", "le code pin"), or written "PIN": "pin
# it: image: nginx@sha256:…" names no code.
_PIN = (r"(?-i:PIN)\b|(?:" + "|".join(f"(?<={d} )" for d in (
    "my", "your", "the", "our", "mon", "ton", "son", "ma", "le", "la", "code")) + r")(?-i:pin)\b")
_CODE_KINDS = (
    rf"{_PIN}|passcode|code[^\S\n]+(?:pin|secret|d['’]accès)|digicode"
    r"|(?:access|security|unlock)[^\S\n]+code|combination|combinaison")
_PLAIN_KINDS = r"code|key|clé|cle"
_KIND = re.compile(rf"\b(?:(?P<code>{_CODE_KINDS})|(?P<password>{_PASSWORD_KINDS})"
                   rf"|(?P<token>{_TOKEN_KINDS})|(?P<plain>{_PLAIN_KINDS}))\b", re.IGNORECASE)
# What a plain code or key opens, named before it or between it and its value.
_OPENS = re.compile(r"(?i)\b(?:doors?|porte|gate|portail|alarme?s?|garage|building|immeuble"
                    r"|entrée|entrance|locks?|cadenas|safe|coffre|wi-?fi|wpa2?|wlan)\b")
# Then what gives the value: a copula (with what may qualify it), a colon, an equals sign.
_GIVES = re.compile(
    r"(?i)(?:(?<![\w'’])(?:is(?:[^\S\n]+(?:now|still|also))?|was(?:[^\S\n]+(?:changed|set)"
    r"[^\S\n]+to)?|(?:has[^\S\n]+been[^\S\n]+)?changed[^\S\n]+to|will[^\S\n]+be"
    r"|(?:c['’])?est(?:[^\S\n]+(?:désormais|maintenant|toujours))?|était|sera)(?!\w)"
    r"|[:=]|->|→)")
_VALUE = re.compile(rf"{_GAP}*(?:(?:le|la){_GAP}+)?(?:{_QUOTED}|{_BARE})", re.IGNORECASE)
_PHRASE_CHARS = 60   # how far from its kind the value may be given ("…, in case I forget, is")
_STOP = re.compile(r"[.!?;\n](?:\s|$)|\n")


def looks_like_token(value: str) -> bool:
    """A generated key or token: eight characters or more, letters and digits."""
    return len(value) >= 8 and any(c.isdigit() for c in value) and \
        any(c.isalpha() for c in value)


def looks_like_code(value: str) -> bool:
    """A PIN or a door code: four to twelve letters, digits, `#` or `*`, at least three of them
    digits (`8362`, `4B719`, `1984#`)."""
    return bool(re.fullmatch(r"[0-9A-Za-z#*]{4,12}", value)) and \
        sum(c.isdigit() for c in value) >= 3


class ProsePasswordDetector(_ValueDetector):
    """A secret given in a sentence, in English or French: a phrase that names its kind ("the
    wifi password", "le code de la porte d'entrée", "my PIN", "the API key they gave me"), then
    within the sentence a copula, a colon or an equals sign ("is", "is now", "was changed to",
    "c'est", "est désormais", ":"), then the value: "the wifi pass is X", "Le mot de passe du
    Wi-Fi, c'est X", "my bank password, in case I forget, is X", "mon code de la porte est X".
    A value that reads as prose ("is on the sticker", "est dans le gestionnaire") is no secret,
    and the next copula of the sentence is tried ("is the same as always: X"). detect-secrets'
    keyword plugin needs `password:` or `password=` right before the value."""

    secret_type = "Forge: password in prose"
    denylist = (_KIND,)

    def analyze_string(self, string: str) -> Generator[str, None, None]:
        # a marker's own words ("[secret: password]") name no kind and give no value
        text = re.sub(r"\[secret: [^\]\n]{1,40}\]", lambda m: "\0" * len(m.group()), string)
        for kind in _KIND.finditer(text):
            stop = _STOP.search(text, kind.end())
            end = min(kind.end() + _PHRASE_CHARS, stop.start() if stop else len(text))
            before = text[max(0, kind.start() - 24):kind.start()]
            for gives in _GIVES.finditer(text, kind.end(), end):
                if kind.group("plain") and not _OPENS.search(before + text[kind.end():gives.start()]):
                    continue
                value = _VALUE.match(text, gives.end())
                if value is None:
                    continue
                if value.group("quoted"):
                    yield value.group("quoted").strip()
                    break
                bare = value.group("bare").rstrip(".,;:)»”’")
                if "\0" not in bare and self.gives(kind, bare):
                    yield bare
                    break

    @staticmethod
    def gives(kind: re.Match, value: str) -> bool:
        if kind.group("token"):
            return looks_like_token(value)
        if kind.group("password"):
            return looks_like_password(value)
        return looks_like_password(value) or looks_like_code(value)


class KeyedTokenDetector(_ValueDetector):
    """`KEY=value` and `key: value` where the key names a token, a bearer or a credential
    (`VAULT_TOKEN=…`, `"access_token": "…"`, `Authorization: Bearer …`): detect-secrets'
    keyword list has password, secret and api_key, not these. The value must be a long,
    high-entropy string (so `max_tokens: 512` or `COMPACTION_TOKEN_THRESHOLD=6000` stay)."""

    secret_type = "Forge: token"
    denylist = (
        re.compile(
            r"(?i)(?<![\w.-])[\w.-]*?(?:token|bearer|credentials?|authorization|auth|cookie)s?[\"']?"
            r"[^\S\n]*(?:=|:|=>)[^\S\n]*[\"']?(?:bearer[^\S\n]+|token[^\S\n]+)?"
            r"(?P<bare>[A-Za-z0-9+/=_.~-]{16,})"),
    )

    def accept(self, value: str) -> bool:
        from detect_secrets.plugins.high_entropy_strings import Base64HighEntropyString

        value = value.rstrip(".")
        return (any(c.isdigit() for c in value) and any(c.isalpha() for c in value)
                and Base64HighEntropyString().calculate_shannon_entropy(value) >= 3.5)


class URLPasswordDetector(_ValueDetector):
    """The password of a URL (`scheme://user:PASSWORD@host`), up to the last `@` before a
    blank: detect-secrets' plugin stops at the characters a URL reserves (`#`, `&`, `!`, `*`...)
    and wants a user name, and people paste `redis://:pw@host` and unencoded passwords."""

    secret_type = "Forge: password in URL"
    denylist = (re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^:@/\s]*:(?P<bare>[^\s@]\S*?)@[^@\s]*(?=\s|$)"),)

    def accept(self, value: str) -> bool:
        return not value.startswith("[secret:")


class AnthropicKeyDetector(RegexBasedDetector):
    """Anthropic API keys (`sk-ant-api03-…`): no plugin of detect-secrets 1.5 knows them."""

    secret_type = "Forge: Anthropic key"
    denylist = (re.compile(r"sk-ant-[a-z]+\d\d-[A-Za-z0-9_-]{80,}"),)


class OpenAIProjectKeyDetector(RegexBasedDetector):
    """OpenAI project and service keys (`sk-proj-…`, `sk-svcacct-…`): detect-secrets' OpenAI
    plugin wants twenty letters or digits on each side of its marker, and these keys put `-`
    and `_` there."""

    secret_type = "Forge: OpenAI key"
    denylist = (re.compile(r"sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{40,}"),)


class GoogleApiKeyDetector(RegexBasedDetector):
    """Google API keys (`AIza…`, 39 characters)."""

    secret_type = "Forge: Google API key"
    denylist = (re.compile(r"\bAIza[0-9A-Za-z_-]{35}(?![0-9A-Za-z_-])"),)


class HuggingFaceTokenDetector(RegexBasedDetector):
    """Hugging Face access tokens (`hf_…`, 34 letters and digits)."""

    secret_type = "Forge: Hugging Face token"
    denylist = (re.compile(r"\bhf_[A-Za-z0-9]{34}(?![A-Za-z0-9])"),)


class GitHubFineGrainedTokenDetector(RegexBasedDetector):
    """GitHub's fine-grained tokens (`github_pat_…`): detect-secrets 1.5 knows only `ghp_` and
    its siblings."""

    secret_type = "Forge: GitHub token"
    denylist = (re.compile(r"\bgithub_pat_[A-Za-z0-9]{22}_[A-Za-z0-9]{59}\b"),)


class AWSSecretKeyDetector(RegexBasedDetector):
    """An AWS secret access key pasted right after its key id (`AKIA… / wJalr…`, `AKIA…:…`):
    detect-secrets finds the id, and the secret half only after a keyword and in quotes."""

    secret_type = "Forge: AWS secret key"
    denylist = (re.compile(r"(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}[^\S\n]*[/:,;|][^\S\n]*"
                           r"([A-Za-z0-9/+]{40})(?![A-Za-z0-9/+])"),)


# -- filters (detect-secrets calls each with the arguments it names) -----------------------------

_PLAIN = re.compile(r"(?i)(?:true|false|yes|no|on|off|none|null|nil|undefined|[\d.,]+|\*[\w.*,-]*)")


def is_plain_value(secret: str) -> bool:
    """What a `KEY=value` line holds when the value is a setting rather than a secret: a
    boolean, a number, a glob (`FORGE_READ_SECRETS=false`, `FORGE_SECRET_FILES=*.pem`)."""
    return bool(_PLAIN.fullmatch(secret.strip("\"'")))

