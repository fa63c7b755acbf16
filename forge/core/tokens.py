"""Token counts: the chat server's `/tokenize` when one is configured and reachable, else an
offline estimate.

The estimate is a few regular-expression rules tuned against a real tokenizer (Gemma 3's, through
llama-server's `/tokenize`); `bench/chat_model.py tokens` measures its error on French, English and
code, and the README states the result. Every threshold it feeds (the compaction token trigger,
the hot block budget) is a coarse budget, so a bounded error is enough; what matters is that the
error is known.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Any

from .log import log

# Letters (any script, accents included), digit runs, newline runs, space runs, symbol runs.
_PIECES = re.compile(r"[^\W\d_]+|\d+|\n+|[ \t]+|[^\w\s]+|_", re.UNICODE)
_CAMEL = re.compile(r"[a-z][A-Z]")

# Tuned with bench/chat_model.py tokens against Gemma 3's tokenizer (262k vocabulary).
WORD_CHARS_FREE = 7          # a word up to this length is usually one token
WORD_CHARS_PER_TOKEN = 5.5   # longer (rarer) words split about every this many characters
SYMBOLS_PER_TOKEN = 3        # punctuation merges: ' ("', ' ->', '"""' are one token each
# The estimate's worst error on one text, measured by bench/chat_model.py tokens (README table:
# +22.2% worst over, -17.6% worst under). The aggregation tier's budget gate takes it as margin.
ESTIMATE_WORST_ERROR = 0.222


def _word_tokens(word: str) -> int:
    if len(word) <= WORD_CHARS_FREE and not _CAMEL.search(word):
        return 1
    parts = len(_CAMEL.findall(word)) + 1
    return max(parts, math.ceil(len(word) / WORD_CHARS_PER_TOKEN))


def estimate_tokens(text: str) -> int:
    """An offline estimate of the tokens `text` costs; error measured by bench/chat_model.py."""
    total = 0
    for m in _PIECES.finditer(text):
        piece = m.group(0)
        first = piece[0]
        if first.isalpha():
            total += _word_tokens(piece)
        elif first.isdigit():
            total += len(piece)          # Gemma splits numbers digit by digit
        elif first == "\n":
            total += 1
        elif first in " \t":
            # A single space is glued to the next word; indentation runs cost about one token.
            total += 0 if len(piece) == 1 else 1
        elif first == "_":
            total += 1
        else:
            total += math.ceil(len(piece) / SYMBOLS_PER_TOKEN)
    return total


@dataclass
class TokenCounter:
    """Counts with the server while it answers, with the estimate otherwise. `source` says which."""

    url: str
    client: Any = None
    source: str = "estimate"
    failures: list[str] = field(default_factory=list)

    def __call__(self, text: str) -> int:
        if self.client is not None:
            try:
                return len(self.client.tokenize(text))
            except Exception as e:  # a server that stops answering: fall back, say so once
                self.failures.append(str(e))
                log.info("token counts fall back to the estimate: %s", e)
                self.client = None
                self.source = "estimate"
                _REACHABLE[self.url] = (False, time.monotonic())
        return estimate_tokens(text)


# url -> (reachable, when it was checked): one probe per process and minute, not per count.
_REACHABLE: dict[str, tuple[bool, float]] = {}
_RECHECK_SECONDS = 60.0
# /tokenize answers in milliseconds; a server that takes longer (hung, black-holed host) means
# the estimate, not a wait of LLAMA_CPP_TIMEOUT in `forge context` or a cron compaction.
PROBE_TIMEOUT_S = 5.0


def token_counter(settings: Any) -> TokenCounter:
    """A counter for this settings' chat server: probes `/tokenize` once, then sticks to it."""
    url = settings.llama_cpp_url
    counter = TokenCounter(url=url)
    if not url:
        return counter
    known = _REACHABLE.get(url)
    fresh = known is not None and time.monotonic() - known[1] < _RECHECK_SECONDS
    if fresh and not known[0]:
        return counter
    try:
        from .llm import ChatClient

        client = ChatClient(settings)
        client.timeout = min(client.timeout, PROBE_TIMEOUT_S)
        if not fresh:
            client.tokenize("probe")
    except Exception as e:
        log.info("no /tokenize at %s (%s): token counts are estimates", url, e)
        _REACHABLE[url] = (False, time.monotonic())
        return counter
    _REACHABLE[url] = (True, time.monotonic())
    counter.client = client
    counter.source = "server"
    return counter


def count_tokens(settings: Any, text: str) -> int:
    """Tokens of `text`: the chat server's `/tokenize` when configured and reachable, else estimated."""
    return token_counter(settings)(text)
