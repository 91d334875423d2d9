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
from collections.abc import Callable, Collection, Mapping, Sequence

from mcpower.defaults import DEFAULT_MODEL, MULTILINGUAL_MODEL

# The weight of the semantic score where the model reads neither the text's language nor its script:
# the keyword side decides (benchmarks/lang_models.py, maint-guide on all-MiniLM-L6-v2: Japanese,
# Chinese and Russian 0.433 -> 0.459 averaged; 0 gave 0.462 but flags more). Text in a language
# the model does not read but in a script it does (German for the English model) keeps the
# usual weight: there shared words carry signal (German 0.741 at 0.5, 0.677 at 0.15).
UNCOVERED_WEIGHT = 0.15
# The weight of the semantic score when the question is in another language than the dataset, both
# read by the model: their words do not match, their meanings do (multilingual-e5-small, maint-guide:
# English questions on the German book 0.524 hybrid, 0.682 semantic alone). Weighed per chunk
# instead, it lifted a translated book's stray English chunks above its own for every question.
CROSS_WEIGHT = 0.8
# The semantic weight of a model's own-language questions where it differs from ranking.SEMANTIC_WEIGHT
# (which SciFact and Cranfield chose for all-MiniLM-L6-v2, and which English datasets keep unchanged).
# multilingual-e5-small on its own books' questions, hybrid nDCG@10 over the three judged books
# (benchmarks/lang_models.py tune, docs/benchmarks.md): 0.5 / 0.6 / 0.7 give de 0.812 / 0.824 / 0.829,
# ja 0.751 / 0.762 / 0.773, ko 0.677 / 0.680 / 0.670; 0.6 is the most that lifts every language.
_SEMANTIC_WEIGHTS = {MULTILINGUAL_MODEL: 0.6}

# Where a packaged model's cosines fall: the cosine taken as a semantic score of 0 and the one taken
# as 1. multilingual-e5-small gives every pair of texts 0.7-0.95: on maint-guide in six languages the
# best passage for a question the book answers scored 0.835-0.90, for one it does not (cooking,
# football ...) 0.78-0.845 (benchmarks/lang_models.py). Read as a plain cosine, that narrow band
# made its semantic side a near-constant next to the keyword side, and no question low-confidence;
# stretched, its scores spread like all-MiniLM-L6-v2's plain cosines (0.1-0.75).
_COSINE_SCALES = {MULTILINGUAL_MODEL: (0.75, 0.95)}

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


def cosine_scale(model: str) -> tuple[float, float]:
    """The cosines a dataset's model gives unrelated texts (score 0) and the closest ones (score 1)."""
    return _COSINE_SCALES.get(model, (0.0, 1.0))


def semantic_weight(model: str, default: float) -> float:
    """A dataset's semantic weight in hybrid mode for questions in its own language: ``default``
    (ranking.SEMANTIC_WEIGHT) unless the model's own was measured (multilingual-e5-small)."""
    return _SEMANTIC_WEIGHTS.get(model, default)


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


def script_of_language(language: str) -> str:
    """The script a language is written in here ('latin' for every language this module lists under none)."""
    base = language.split("-")[0]
    return next((name for name, (_, written) in _SCRIPTS.items() if base in written), "latin")


def script_of_text(text: str) -> str:
    """The script most of ``text``'s letters are in ('latin' unless one of the others holds most)."""
    letters = sum(1 for c in text if c.isalpha())
    return next((name for name, (p, _) in _SCRIPTS.items() if 2 * len(p.findall(text)) > letters), "latin")


def reads_script(languages: Collection[str] | None, script: str) -> bool:
    """Whether some of ``languages`` (None: any) is written in ``script``."""
    return languages is None or any(script_of_language(lang) == script for lang in languages)


def semantic_weights(
    model: str,
    recorded: Collection[str] | None,
    dataset_languages: Mapping[str, int],
    query: str,
    ids: Sequence[int],
    languages_of: Callable[[Sequence[int]], dict[int, str]],
    weight: float,
    query_language: Callable[[str], str] | None = None,
) -> dict[int, float] | None:
    """The semantic weight of each candidate of a hybrid search, or None when every one is ``weight``.

    A question in the dataset's own language weighs ``semantic_weight(model, weight)``: ``weight``
    for the English model (so an English dataset ranks as it did), 0.6 for multilingual-e5-small.
    Every candidate weighs ``CROSS_WEIGHT`` when the question is in another language than the
    dataset's main one (most of its chunks), both read by a model of several languages: told by the
    question's script, else by ``query_language`` (which loads the language model; called only
    then). The same weight for all, so chunks of the book's other languages are not lifted above it.
    A candidate whose language the model reads in no script of (``languages_of`` gives them, looked
    up only when the dataset holds such a language) weighs ``UNCOVERED_WEIGHT``; so does every one
    when the model reads no language of the question's script.
    """
    languages = model_languages(model, recorded)
    qscript = script_of_text(query)
    if not reads_script(languages, qscript):
        return dict.fromkeys(ids, UNCOVERED_WEIGHT)
    told = {lang: n for lang, n in dataset_languages.items() if lang != "und"}
    base = semantic_weight(model, weight)
    if languages is not None and len(languages) > 1 and told:
        main = max(told, key=lambda lang: told[lang])
        if reads(languages, main):
            if script_of_language(main) != qscript:
                base = CROSS_WEIGHT
            elif query_language is not None:
                qlang = query_language(query)
                if qlang not in ("und", main.split("-")[0]) and reads(languages, qlang):
                    base = CROSS_WEIGHT
    if all(reads_script(languages, script_of_language(lang)) for lang in told):
        return None if base == weight else dict.fromkeys(ids, base)
    found = languages_of(ids)
    weight_of: dict[str, float] = {}  # by language: a search's hundred candidates hold a few
    for lang in set(found.values()) | {"und"}:
        weight_of[lang] = base if reads_script(languages, script_of_language(lang)) else UNCOVERED_WEIGHT
    return {i: weight_of[found.get(i, "und")] for i in ids}
