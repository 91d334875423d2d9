"""What each side of a hybrid search is worth: the semantic score counts less where the dataset's
model does not read the text (issue 27.3).

A model reads the languages its record names (mcpower/embedding/model.py: its card's ``language:``;
all-MiniLM-L6-v2 English, multilingual-e5-small about a hundred). Its cosine between a question and a
chunk in a language it does not read is noise that looks like signal: all-MiniLM-L6-v2 ranked
chapter titles first on Japanese text and was never low-confidence there. So in hybrid mode a chunk
whose language the model does not read, or every chunk when the question is in a script none of
its languages is written in, has its semantic score weighed UNCOVERED_WEIGHT instead of
ranking.SEMANTIC_WEIGHT, and its keyword score the rest (the score stays 0..1, and low-confidence
keeps its meaning: docs/search.md#languages-and-models).

Nothing is looked up when the model reads every language the dataset holds (its manifest counts
chunks per language) and the question's script: an English dataset of the English model costs
nothing more. A question's language is told by its script only (a regular expression, never the
language model, which would load on the cold search path): a short question is too short to tell
German from English anyway, and its words are what the keyword side matches.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection, Sequence

from mcpower.defaults import DEFAULT_MODEL, MULTILINGUAL_MODEL

# The weight of the semantic score where the model does not read the text: the keyword side decides
# (benchmarks/lang_models.py: German, French, Japanese and Chinese books on all-MiniLM-L6-v2).
UNCOVERED_WEIGHT = 0.15

# Languages the packaged models read, for manifests written before a model's languages were recorded.
_KNOWN: dict[str, frozenset[str] | None] = {DEFAULT_MODEL: frozenset({"en"})}

# Scripts a question can be written in, and the languages (of the models' records) written in each.
_SCRIPTS: dict[str, tuple[re.Pattern[str], frozenset[str]]] = {
    "cjk": (
        re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af\u1100-\u11ff]"),
        frozenset({"ja", "zh", "ko", "yue", "wuu"}),
    ),
    "cyrillic": (
        re.compile(r"[\u0400-\u04ff]"),
        frozenset({"ru", "uk", "bg", "be", "sr", "mk", "kk", "ky", "mn", "tg", "tt", "ba", "cv", "sah"}),
    ),
    "greek": (re.compile(r"[\u0370-\u03ff]"), frozenset({"el"})),
    "arabic": (
        re.compile(r"[\u0600-\u06ff\u0750-\u077f]"),
        frozenset({"ar", "fa", "ur", "ps", "sd", "ug", "ku", "ckb"}),
    ),
    "hebrew": (re.compile(r"[\u0590-\u05ff]"), frozenset({"he", "yi"})),
    "indic": (
        re.compile(r"[\u0900-\u0dff]"),
        frozenset({"hi", "mr", "ne", "sa", "bn", "as", "pa", "gu", "or", "ta", "te", "kn", "ml", "si"}),
    ),
    "thai": (re.compile(r"[\u0e00-\u0eff]"), frozenset({"th", "lo"})),
}


def model_languages(model: str, recorded: Collection[str] | None) -> frozenset[str] | None:
    """The languages a dataset's model reads: its record's, else what is known of a packaged model;
    None: not known (taken as every language)."""
    if recorded is not None:
        return frozenset(recorded)
    if model == MULTILINGUAL_MODEL:
        from mcpower.embedding.packaged import LANGUAGES

        return LANGUAGES
    return _KNOWN.get(model)


def reads(languages: Collection[str] | None, language: str) -> bool:
    """Whether a model reading ``languages`` (None: any) reads text in ``language`` ('und': taken as read)."""
    return languages is None or language == "und" or language.split("-")[0] in languages


def reads_script(languages: Collection[str] | None, text: str) -> bool:
    """Whether the script most of ``text``'s letters are in is one some of ``languages`` are written in
    (Latin, and scripts this module does not know, count as read)."""
    if languages is None:
        return True
    letters = sum(1 for c in text if c.isalpha())
    for pattern, written in _SCRIPTS.values():
        if 2 * len(pattern.findall(text)) > letters:
            return bool(written & set(languages))
    return True


def semantic_weights(
    model: str,
    recorded: Collection[str] | None,
    dataset_languages: Collection[str],
    query: str,
    ids: Sequence[int],
    languages_of: Callable[[Sequence[int]], dict[int, str]],
    weight: float,
) -> dict[int, float] | None:
    """The semantic weight of each candidate of a hybrid search, or None when every one is ``weight``
    (the model reads the question's script and every language of the dataset: nothing looked up).

    ``languages_of`` gives candidates' languages; it is called only when the dataset holds a
    language the model does not read.
    """
    languages = model_languages(model, recorded)
    if languages is None:
        return None
    if not reads_script(languages, query):
        return dict.fromkeys(ids, UNCOVERED_WEIGHT)
    if all(reads(languages, lang) for lang in dataset_languages):
        return None
    found = languages_of(ids)
    return {i: weight if reads(languages, found.get(i, "und")) else UNCOVERED_WEIGHT for i in ids}
