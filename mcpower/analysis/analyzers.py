"""How text becomes keyword terms, per language: one analyzer that the keyword index, queries and
snippets all call, so a query term is always the term the index holds.

For every language the text is NFKC-normalised (full-width Latin becomes ASCII, half-width kana
full-width) and lower-cased, then split into

- **runs of Chinese, Japanese or Korean characters**, which are written without spaces between
  words: each run gives its overlapping character pairs (a run of one character, itself), as
  Lucene's CJKAnalyzer does; "硬链接" gives 硬链 链接, so a question finds a sentence holding its
  words wherever they stand;
- **words** (runs of letters and digits; an apostrophe or underscore splits them): stemmed with the
  language's Snowball stemmer (PyStemmer) where Snowball has one, then stripped of diacritics, so
  "Pakete"/"Paketen" and "paquets"/"paquet" meet, and "élève" is found by "eleve". Words in a
  Chinese, Japanese or Korean chunk (commands, English terms) get the English stemmer. A chunk
  whose language is undetermined (``und``: too short to tell, a table of names) is analysed as the
  dataset's main language (:func:`undetermined_as`), recorded in its manifest; in a dataset of no
  told language (or one written before that was recorded) it keeps its words unstemmed.

Queries are analysed the same way under each language the dataset holds (a short query's
language is a guess), each language's stopwords left out, and every distinct term counted once.

``SCHEME`` names this analysis in manifests; a dataset without one was indexed by FTS5's own
Porter tokenizer and is searched that way (store/local/fts.py).
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mcpower.analysis.languages import UNDETERMINED
from mcpower.analysis.stopwords import stopwords

SCHEME = "mcpower-text-1"
# Snowball stemmers by language code (PyStemmer's algorithm names). English is Porter's original
# algorithm, as FTS5's porter tokenizer (and so every dataset before this analysis) stemmed it:
# keyword-only nDCG@10 Cranfield 0.3692, SciFact 0.6927 (FTS5 before: 0.3693, 0.6903); Snowball's
# newer "english" gave 0.3725 and 0.6897, no better overall (docs/search.md#languages).
STEMMERS = {
    "en": "porter",
    "de": "german",
    "fr": "french",
    "es": "spanish",
    "it": "italian",
    "pt": "portuguese",
    "nl": "dutch",
    "ru": "russian",
    "sv": "swedish",
    "da": "danish",
    "no": "norwegian",
    "nn": "norwegian",
    "fi": "finnish",
    "hu": "hungarian",
    "ro": "romanian",
    "tr": "turkish",
    "ca": "catalan",
    "eu": "basque",
    "ga": "irish",
    "lt": "lithuanian",
    "el": "greek",
    "ar": "arabic",
    "id": "indonesian",
    "hi": "hindi",
    "ne": "nepali",
    "ta": "tamil",
    "sr": "serbian",
    "hy": "armenian",
    "yi": "yiddish",
    "pl": "polish",
    "cs": "czech",
    "et": "estonian",
    "fa": "persian",
    "eo": "esperanto",
}
# Languages written without spaces whose Latin words are English terms (commands, names).
CJK_LANGUAGES = frozenset({"ja", "zh", "ko", "wuu", "yue"})
# Han, kana (with the prolonged sound mark and iteration marks), Hangul syllables and jamo.
CJK = "\u1100-\u11ff\u3005\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff"
# Words are runs of letters and digits; a word holding CJK characters is split into its CJK runs and
# the rest. (One pattern for both, a class of "word characters but not CJK", took 20-120 ms to compile:
# too much for a cold search.)
_WORDS = re.compile(r"[^\W_]+")
_CJK_PATTERN = f"([{CJK}]+)"  # compiled when a word first holds a non-ASCII letter (not for English)
# A query is analysed under each language holding at least this share of the dataset's chunks (and
# always its first): a translated book's untranslated leftovers (3-25% English) would otherwise add
# English stems of every question's words, which match those few chunks with a high idf. On the
# judged German and French sets keyword nDCG@10 rose from 0.609 to 0.635 and 0.672 to 0.688
# (measured with the first language alone). A fifth: a dataset of five languages in equal parts is
# still searched in each of them.
MIN_LANGUAGE_SHARE = 0.2
MAX_TERM_CHARS = 64  # longer "words" are hashes or base64; cut so no term bloats the index
MAX_QUERY_TERMS = 256  # a 1024-character CJK question has ~1000 pairs; the rest add nothing


def undetermined_as(chunks_per_language: Mapping[str, int]) -> str | None:
    """The language a dataset's chunks of undetermined language are analysed as: the told language
    holding most of its chunks (None: no language was told).

    A chunk too short to tell is most likely in the language around it. Analysed apart (its words
    unstemmed), the same word was two terms in one dataset, "cookie" in the short chunks and "cooki"
    in the rest, each with its own document frequency: a question's words weighed more in the few
    short chunks than in the many others (five one-line pages outranked the section about the
    question), and in a dataset mostly of undetermined chunks a question analysed their way missed
    the inflected words of the told ones ("tools" never found "tool").
    """
    told = [(n, code) for code, n in chunks_per_language.items() if code != UNDETERMINED and n > 0]
    return min(told, key=lambda t: (-t[0], t[1]))[1] if told else None


def analysis_language(language: str, undetermined: str | None) -> str:
    """The language a chunk in ``language`` is analysed as, in a dataset whose undetermined chunks
    are analysed as ``undetermined`` (its manifest's ``analysis.undetermined``)."""
    return undetermined if language == UNDETERMINED and undetermined else language


def query_languages(chunks_per_language: Mapping[str, int], undetermined: str | None = None) -> tuple[str, ...]:
    """The languages a dataset's queries are analysed under: those holding MIN_LANGUAGE_SHARE of
    its chunks, and always the one holding most (``und`` for a dataset with none recorded); its
    undetermined chunks count as ``undetermined`` when they were analysed as it."""
    if undetermined and chunks_per_language.get(UNDETERMINED):
        merged = dict(chunks_per_language)
        merged[undetermined] = merged.get(undetermined, 0) + merged.pop(UNDETERMINED)
        chunks_per_language = merged
    total = sum(chunks_per_language.values())
    ranked = sorted(chunks_per_language.items(), key=lambda kv: (-kv[1], kv[0]))
    if not ranked or total <= 0:
        return (UNDETERMINED,)
    return tuple(code for i, (code, n) in enumerate(ranked) if i == 0 or n >= MIN_LANGUAGE_SHARE * total)


def stemmer_of(language: str) -> str | None:
    """The Snowball algorithm a chunk in ``language`` is stemmed with (None: not stemmed)."""
    if language in CJK_LANGUAGES:
        return STEMMERS["en"]
    return STEMMERS.get(language)


def index_terms(text: str, language: str) -> list[str]:
    """Every term of ``text`` in order, as the keyword index holds it for a chunk in ``language``."""
    return _terms(text, stemmer_of(language))


def query_terms(text: str, languages: Iterable[str]) -> list[str]:
    """The terms a keyword query ORs: ``text`` analysed under each of ``languages`` (the dataset's),
    each term once, stopwords left out (all kept if nothing else is left).

    Whose stopwords: the query's language, when its stopwords say which it is (the dataset language
    whose stopwords it holds most of: "Wie baue ich die Pakete" is German, so "wie", "ich", "die" go
    under every analysis, while "man" stays in "how do I read a man page"); else each language's
    own under its analysis, and the union of all of them for chunks of no known language.
    """
    langs = list(dict.fromkeys(languages)) or [UNDETERMINED]
    tokens = _tokens(text)
    everyone = frozenset().union(stopwords("en"), *(stopwords(lang) for lang in langs))
    spoken = _spoken(tokens, langs)
    out: dict[str, None] = {}
    everything: dict[str, None] = {}
    for language in langs:
        if spoken is not None:
            stop = stopwords(spoken)
        else:
            stop = everyone if language == UNDETERMINED else stopwords(language)
        algorithm = stemmer_of(language)
        for word, cjk in tokens:
            terms = _pairs(word) if cjk else [_fold(_stem(word, algorithm))]
            for term in terms:
                everything[term] = None
                if cjk or word not in stop:
                    out[term] = None
    return list(out or everything)[:MAX_QUERY_TERMS]


def _spoken(tokens: list[tuple[str, bool]], languages: list[str]) -> str | None:
    """The one language among ``languages`` (and English) whose stopwords the query holds most of,
    if one holds more than every other."""
    counts = sorted(
        ((sum(1 for word, cjk in tokens if not cjk and word in stopwords(lang)), lang) for lang in {*languages, "en"}),
        reverse=True,
    )
    if not counts or counts[0][0] == 0 or (len(counts) > 1 and counts[1][0] == counts[0][0]):
        return None
    return counts[0][1]


@dataclass(frozen=True)
class Marks:
    """What marks a chunk's text as matching a query, for snippets and highlighting (lower case)."""

    words: tuple[str, ...]  # the query's words as written: whole words
    stems: tuple[str, ...]  # their stems under the dataset's languages: a stem is mostly a word's beginning
    pairs: tuple[str, ...]  # its CJK character pairs (or lone characters): anywhere

    @property
    def all(self) -> list[str]:
        return [*self.words, *self.stems, *self.pairs]


def marks(text: str, languages: Iterable[str]) -> Marks:
    """The :class:`Marks` of query ``text`` in a dataset of ``languages``: stopwords (of those
    languages and English) and stems under three characters left out."""
    langs = list(dict.fromkeys(languages)) or [UNDETERMINED]
    stop = frozenset().union(*(stopwords(lang) for lang in langs), stopwords("en"))
    words: dict[str, None] = {}
    stems: dict[str, None] = {}
    pairs: dict[str, None] = {}
    for word, cjk in _tokens(text):
        if cjk:
            pairs.update(dict.fromkeys(_pairs(word)))
        elif word not in stop:
            words[word] = None
            for language in langs:
                stem = _stem(word, stemmer_of(language))
                if len(stem) >= 3 and stem != word:
                    stems[stem] = None
    return Marks(tuple(words), tuple(s for s in stems if s not in words), tuple(pairs))


def snippet_terms(text: str, languages: Iterable[str]) -> list[str]:
    """Lower-case strings whose presence in a chunk's lower-cased text marks it as matching
    ``text``: :func:`marks`, all together."""
    return marks(text, languages).all


def _tokens(text: str) -> list[tuple[str, bool]]:
    """(token, is a CJK run) of ``text``, normalised and lower-cased."""
    out: list[tuple[str, bool]] = []
    for word in _WORDS.findall(unicodedata.normalize("NFKC", text).lower()):
        if word.isascii():
            out.append((word[:MAX_TERM_CHARS], False))
            continue
        for i, part in enumerate(re.split(_CJK_PATTERN, word)):  # odd parts are the CJK runs
            if part:
                out.append((part, True) if i % 2 else (part[:MAX_TERM_CHARS], False))
    return out


def _terms(text: str, algorithm: str | None) -> list[str]:
    out: list[str] = []
    words: list[str] = []
    slots: list[int] = []
    for token, cjk in _tokens(text):
        if cjk:
            out.extend(_pairs(token))
        else:
            slots.append(len(out))
            out.append("")
            words.append(token)
    for slot, stem in zip(slots, _stem_all(words, algorithm)):
        out[slot] = _fold(stem)
    return out


def _pairs(run: str) -> list[str]:
    """A CJK run's overlapping character pairs, then its characters (Lucene's CJKBigramFilter with
    outputUnigrams): a pair matches the words, a character what a pair cannot, a one-character word
    or a word split by another. Measured on the judged Japanese, Chinese and Korean sets, keyword
    nDCG@10: pairs alone 0.584, 0.659, 0.571; pairs and characters 0.598, 0.677, 0.587; runs of Han
    characters cut into words by rjieba (jieba's dictionary, a 3.7 MB wheel) 0.575, 0.683, 0.571 —
    better Chinese by 0.006, worse Japanese, another dependency (docs/search.md#languages)."""
    if len(run) == 1:
        return [run]
    return [*(run[i : i + 2] for i in range(len(run) - 1)), *run]


def _fold(term: str) -> str:
    """``term`` without diacritics (é -> e, ü -> u, й -> и), as FTS5's remove_diacritics did."""
    if term.isascii():
        return term
    decomposed = unicodedata.normalize("NFD", term)
    return unicodedata.normalize("NFC", "".join(c for c in decomposed if not unicodedata.combining(c)))


def _stem(word: str, algorithm: str | None) -> str:
    return _stem_all([word], algorithm)[0] if algorithm else word


def _stem_all(words: list[str], algorithm: str | None) -> list[str]:
    if not algorithm or not words:
        return words
    stems: list[str] = _stemmer(algorithm).stemWords(words)
    return stems


_local = threading.local()  # PyStemmer's stemmers keep a cache and are not thread-safe: one per thread


def _stemmer(algorithm: str) -> Any:
    cache: dict[str, Any] | None = getattr(_local, "stemmers", None)
    if cache is None:
        cache = _local.stemmers = {}
    stemmer = cache.get(algorithm)
    if stemmer is None:
        import Stemmer

        stemmer = cache[algorithm] = Stemmer.Stemmer(algorithm)
    return stemmer
