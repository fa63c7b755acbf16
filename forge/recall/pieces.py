"""The sentence model's tokenizer without its 0.1 s build: sentencepiece itself, loaded per text
with only the pieces that text can use.

`sentencepiece` builds its tokenizer anew in every process: it parses the model's 128,000
pieces and builds their trie (~0.1 s, most of the sentence model's load once its weights are
mapped). A unigram tokenizer's choice for a text depends only on the pieces found in the text
once it is normalized (its lattice), on the lowest score of the model's ordinary pieces (the
unknown character's penalty), on the highest (the user-defined pieces' score), and on the
special and user-defined pieces. So the same `sentencepiece` loaded from a model that holds
those pieces and no other gives the same ids, renumbered (`Pieces.encode` maps them back): the
segmentation is sentencepiece's own, not a copy of it (tests/test_recall_sentence.py checks
thousands of texts against the whole model). The lowest and highest scoring ordinary pieces
are in every small model whatever the text, since sentencepiece derives scores from them.

Which pieces a text can use comes from an index the first process writes in the user's cache
folder (`write`: beside the sentence model's uncompressed weights, a folder written whole and
renamed into place) and later ones map (`mapped`): the model's pieces as they stand in its
file, and a hash table of every piece and every prefix of one (a walk along the text stops at
the first prefix no piece has). A small model loads in ~0.3 ms; a process that tokenizes much
(FULL_AFTER: a reindex, a batch of notes) builds the whole tokenizer once and uses it from then
on: the same ids, at its own speed.
"""
from __future__ import annotations

import json
import os
import struct
import sys
import threading
from pathlib import Path
from typing import Any
from zlib import crc32

FORMAT = "usem3-pieces-1"
# The work done through small models, in characters walked (~1.5 us each; a small model's load,
# ~0.25 ms, counts as SMALL_MODEL of them), before the whole tokenizer is built once: its ~0.1 s
# build is ~70,000 of them; at 20,000, a process that tokenizes much (a reindex, a batch of
# notes) spends ~30 ms before it, and a recall that reads 30 notes of 200 characters stays below
# (bench/sentence_cost.py)
FULL_AFTER = 20_000
SMALL_MODEL = 170
# Tokenized by the whole model when the index is written, and through the index at each load:
# an index that gives other ids is not used (a damaged file, another model's pieces)
PROBE = ("Forge : où est le compteur d'eau ? The fuse box, 2×16 A — ﬁn 🚀 東京 مرحبا "
         "extra_token_id_1\u3000Ⅻ")
_FILES = ("spec.bin", "pieces.bin", "pieces.u32", "keys.bin", "keys.u32", "values.i32",
          "slots.u32")
# sentencepiece's piece types (sentencepiece_model.proto)
_NORMAL, _USER_DEFINED, _UNUSED = 1, 4, 5
_MATCHED = (_NORMAL, _USER_DEFINED, _UNUSED)   # the types its unigram trie holds


def folder_for(cache: Path, version: str, size: int) -> Path:
    """The index of this version's tokenizer model (`size`: its file's, in bytes)."""
    return cache / f"{FORMAT}-{version}-{size}"


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, pos


def _fields(data: bytes, start: int, end: int) -> list[tuple[int, int, Any, int, int]]:
    """A protobuf message's fields: (number, wire type, value or (start, end) of its bytes,
    start and end of the whole field)."""
    out = []
    pos = start
    while pos < end:
        first = pos
        tag, pos = _varint(data, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(data, pos)
            value, pos = (pos, pos + length), pos + length
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"wire type {wire}")
        out.append((number, wire, value, first, pos))
    if pos != end:
        raise ValueError("truncated message")
    return out


def parse(data: bytes) -> tuple[list[tuple[str, float, int, bytes]], bytes]:
    """A sentencepiece model's pieces, (piece, score, type, the piece's field as it stands in the
    file) in id order, and the model's other fields as they stand (its specs)."""
    pieces = []
    rest = []
    for number, wire, value, first, end in _fields(data, 0, len(data)):
        if number != 1 or wire != 2:
            rest.append(data[first:end])
            continue
        piece, score, kind = "", 0.0, _NORMAL
        for n, w, v, _, _ in _fields(data, *value):
            if n == 1 and w == 2:
                piece = data[v[0]:v[1]].decode("utf-8")
            elif n == 2 and w == 5:
                score = struct.unpack("<f", v)[0]
            elif n == 3 and w == 0:
                kind = v
        pieces.append((piece, score, kind, data[first:end]))
    return pieces, b"".join(rest)


def write(model_file: str, folder: Path) -> bool:
    """Write the index of `model_file` to `folder` (a whole folder renamed into place, so a
    reader never sees half of one); any failure leaves the cache as it was. True when written."""
    import shutil
    import tempfile
    from array import array

    try:
        with open(model_file, "rb") as source:
            pieces, spec = parse(source.read())
    except (OSError, ValueError, IndexError, UnicodeDecodeError):
        return False
    ordinary = [i for i, p in enumerate(pieces) if p[2] == _NORMAL]
    if not ordinary:
        return False
    always = sorted({i for i, p in enumerate(pieces) if p[2] not in (_NORMAL, _UNUSED)}
                    | {min(ordinary, key=lambda i: pieces[i][1]),
                       max(ordinary, key=lambda i: pieces[i][1])})
    values: dict[bytes, int] = {}   # piece -> its id; a prefix of one and no piece -> -1
    for pid, (piece, _, kind, _) in enumerate(pieces):
        if kind not in _MATCHED or not piece:
            continue
        for end in range(1, len(piece)):
            values.setdefault(piece[:end].encode("utf-8"), -1)
        values[piece.encode("utf-8")] = pid
    size = 1 << max(4, (2 * len(values) - 1).bit_length())   # at most half full
    slots = array("I", bytes(4 * size))
    keys, key_ends, key_values = bytearray(), array("I", [0]), array("i")
    for index, (key, value) in enumerate(values.items()):
        keys += key
        key_ends.append(len(keys))
        key_values.append(value)
        slot = crc32(key) & (size - 1)
        while slots[slot]:
            slot = (slot + 1) & (size - 1)
        slots[slot] = index + 1
    piece_ends = array("I", [0])
    for _, _, _, raw in pieces:
        piece_ends.append(piece_ends[-1] + len(raw))
    try:
        import sentencepiece

        probe = sentencepiece.SentencePieceProcessor(model_file=model_file).encode(PROBE)
    except (OSError, RuntimeError):
        return False
    manifest = {"format": FORMAT, "byteorder": sys.byteorder, "pieces": len(pieces),
                "keys": len(values), "slots": size, "always": always,
                "longest": max(len(p[0]) for p in pieces), "probe": probe}
    contents = {"spec.bin": spec, "pieces.bin": b"".join(p[3] for p in pieces),
                "pieces.u32": piece_ends.tobytes(), "keys.bin": bytes(keys),
                "keys.u32": key_ends.tobytes(), "values.i32": key_values.tobytes(),
                "slots.u32": slots.tobytes()}
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        work = tempfile.mkdtemp(prefix=".indexing-", dir=folder.parent)
        try:
            for name, content in contents.items():
                Path(work, name).write_bytes(content)
            Path(work, "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
            os.rename(work, folder)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    except OSError:
        return False   # read-only home, a full disk, another process first
    return True


def mapped(folder: Path, model_file: str) -> "Pieces | None":
    """The tokenizer from the index in `folder`, or None when there is no usable one."""
    import mmap

    try:
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        if manifest.get("format") != FORMAT or manifest.get("byteorder") != sys.byteorder:
            return None
        maps = {}
        for name in _FILES:
            with open(folder / name, "rb") as f:
                maps[name] = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        pieces = Pieces(manifest, maps, model_file)
    except (OSError, ValueError, KeyError, TypeError, RuntimeError):
        return None
    return pieces


class Pieces:
    """sentencepiece's `encode`, each text through a model of the pieces it can use."""

    def __init__(self, manifest: dict, maps: dict, model_file: str):
        import sentencepiece

        self._spm = sentencepiece
        self._model_file = model_file
        self._spec = bytes(maps["spec.bin"])
        self._pieces = maps["pieces.bin"]
        self._piece_ends = memoryview(maps["pieces.u32"]).cast("I")
        self._keys = maps["keys.bin"]
        self._key_ends = memoryview(maps["keys.u32"]).cast("I")
        self._values = memoryview(maps["values.i32"]).cast("i")
        self._slots = memoryview(maps["slots.u32"]).cast("I")
        count, keys, size = manifest["pieces"], manifest["keys"], manifest["slots"]
        if (len(self._piece_ends) != count + 1 or len(self._key_ends) != keys + 1
                or len(self._values) != keys or len(self._slots) != size
                or size & (size - 1) or len(self._pieces) != self._piece_ends[count]
                or len(self._keys) != self._key_ends[keys]):
            raise ValueError("an index of another size than its manifest says")
        self._mask = size - 1
        self._always = [int(i) for i in manifest["always"]]
        self._longest = int(manifest["longest"])
        # normalizes as the whole model does (the same specs, the same user-defined pieces)
        self._base = self._model(self._always)
        self._whole: Any = None
        self._walked = 0
        self._lock = threading.Lock()
        if self._small(PROBE) != manifest["probe"]:
            raise ValueError("an index whose probe gives other ids than the whole model's")

    def _model(self, ids: list[int]) -> Any:
        ends, pieces = self._piece_ends, self._pieces
        proto = b"".join([pieces[ends[i]:ends[i + 1]] for i in ids] + [self._spec])
        return self._spm.SentencePieceProcessor(model_proto=proto)

    def used(self, text: str) -> list[int]:
        """The ids of the pieces found in `text` once normalized, and the ones always kept."""
        normalized = self._base.normalize(text)
        found = set(self._always)
        longest, length = self._longest, len(normalized)
        # the hash table's lookup written inline: it runs for each prefix at each position;
        # a key that is neither a piece nor a prefix of one ends the walk at this position
        slots, ends, keys, values, mask = (self._slots, self._key_ends, self._keys,
                                           self._values, self._mask)
        for start in range(length):
            for end in range(start + 1, min(start + longest, length) + 1):
                key = normalized[start:end].encode("utf-8")
                slot = crc32(key) & mask
                while True:
                    index = slots[slot]
                    if not index or keys[ends[index - 1]:ends[index]] == key:
                        break
                    slot = (slot + 1) & mask
                if not index:
                    break
                value = values[index - 1]
                if value >= 0:
                    found.add(value)
        return sorted(found)

    def encode(self, text: Any, out_type: type = int, add_bos: bool = False,
               add_eos: bool = False) -> Any:
        """`sentencepiece.SentencePieceProcessor.encode` of the whole model, ids only."""
        if out_type is not int:
            raise ValueError("ids only")
        if not isinstance(text, str):
            return [self.encode(t, out_type, add_bos, add_eos) for t in text]
        with self._lock:
            whole = self._whole
            self._walked += len(text) + SMALL_MODEL
            if whole is None and self._walked > FULL_AFTER:
                whole = self._whole = self._spm.SentencePieceProcessor(
                    model_file=self._model_file)
        if whole is not None:
            return whole.encode(text, out_type=int, add_bos=add_bos, add_eos=add_eos)
        return self._small(text, add_bos, add_eos)

    def _small(self, text: str, add_bos: bool = False, add_eos: bool = False) -> list[int]:
        ids = self.used(text)
        small = self._model(ids)
        return [ids[i] for i in small.encode(text, out_type=int, add_bos=add_bos,
                                             add_eos=add_eos)]
