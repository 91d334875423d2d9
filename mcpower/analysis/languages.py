"""Language codes: the ones detection yields and ``--language`` accepts, and their names.

Codes are ISO 639-1 where one exists (``de``, ``ja``), else ISO 639-3 (``ast``), as the detector's
model labels them. ``und`` (ISO 639-2 "undetermined") is a text whose language is not known: too
short, too mixed, or mostly code.
"""

from __future__ import annotations

import re

UNDETERMINED = "und"

# The languages the bundled detector (fastText lid.176) tells apart.
_CODES = """af als am an ar arz as ast av az azb ba bar bcl be bg bh bn bo bpy br bs bxr ca ce ceb ckb co cs cv cy
    da de diq dsb dty dv el eml en eo es et eu fa fi fr frr fy ga gd gl gom gu gv he hi hif hr hsb ht hu hy ia
    id ie ilo io is it ja jbo jv ka kk km kn ko krc ku kv kw ky la lb lez li lmo lo lrc lt lv mai mg mhr min mk
    ml mn mr mrj ms mt mwl my myv mzn nah nap nds ne new nl nn no oc or os pa pam pfl pl pms pnb ps pt qu rm ro
    ru rue sa sah sc scn sco sd sh si sk sl so sq sr su sv sw ta te tg th tk tl tr tt tyv ug uk ur uz vec vep
    vi vls vo wa war wuu xal xmf yi yo yue zh"""
DETECTABLE = frozenset(_CODES.split())
# What people type for a language that has a code of its own here.
ALIASES = {
    "zh-cn": "zh",
    "zh-hans": "zh",
    "zh-tw": "zh",
    "zh-hant": "zh",
    "zh-hk": "zh",
    "cn": "zh",
    "jp": "ja",
    "kr": "ko",
    "pt-br": "pt",
    "pt-pt": "pt",
    "en-us": "en",
    "en-gb": "en",
    "nb": "no",
    "iw": "he",
}
NAMES = {
    "en": "English",
    "de": "German",
    "fr": "French",
    "es": "Spanish",
    "it": "Italian",
    "pt": "Portuguese",
    "nl": "Dutch",
    "ru": "Russian",
    "sv": "Swedish",
    "da": "Danish",
    "no": "Norwegian",
    "fi": "Finnish",
    "pl": "Polish",
    "cs": "Czech",
    "uk": "Ukrainian",
    "tr": "Turkish",
    "ja": "Japanese",
    "zh": "Chinese",
    "ko": "Korean",
    "ar": "Arabic",
    "he": "Hebrew",
    "el": "Greek",
    "hu": "Hungarian",
    "ro": "Romanian",
    "ca": "Catalan",
    "vi": "Vietnamese",
    "th": "Thai",
    UNDETERMINED: "undetermined",
}
LANGUAGE_CODE = re.compile(r"^(?:[a-z]{2,3}|und)$")


def normalize_language(text: str) -> str | None:
    """The code ``text`` names (``'DE'`` -> ``'de'``, ``'zh-CN'`` -> ``'zh'``), or None if it names
    none this mcpower knows."""
    code = text.strip().lower().replace("_", "-")
    code = ALIASES.get(code, code)
    return code if code in DETECTABLE or code == UNDETERMINED else None


def is_language(code: str) -> bool:
    """Whether ``code`` is a language code as stored: detectable, or ``und``."""
    return code == UNDETERMINED or code in DETECTABLE


def language_name(code: str) -> str:
    """A name for people: 'German' for ``de``; the code itself for a language without one here."""
    return NAMES.get(code, code)
