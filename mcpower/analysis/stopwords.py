"""Words too common to help a keyword query, per language.

They are left out of queries, not of the index (so a phrase-like question made only of them still
finds something, and BM25's statistics stay those of the text). Each list is the small core of
Snowball's stop lists for the language: articles, pronouns, prepositions, conjunctions, auxiliaries
and the question words people start a search with. Chinese, Japanese and Korean have none: their
text is indexed as overlapping character pairs, whose rarity BM25 weighs by itself.
"""

from __future__ import annotations

# English: the list keyword search has always used (mcpower/terms.py), unchanged.
ENGLISH = """a an and are as at be but by can do does for from has have how i if in into is it its of on or so
than that the their them then there these they this to was were what when where which who why will with you your"""

_LISTS = {
    "en": ENGLISH,
    "de": """aber alle als also am an auch auf aus bei bin bis bist da damit dann das dass dem den der des die dies
    diese dieser dieses doch du durch ein eine einem einen einer eines er es für hat hatte ich ihr im in ist
    ja kann man mit nach nicht noch nur ob oder sich sie sind so über um und uns von vor war warum was wenn
    werden wer wie wir wird wo zu zum zur welche welcher welches wieso""",
    "fr": """à au aux avec c ce ces cette comment d dans de des du elle en est et être il ils j je l la le les
    leur lui m ma mais me même mes n ne nous on ou où par pas pour qu quand que quel quelle quels qui s sa
    se ses son sont sur t ta te tes toi ton tu un une vos votre vous y est-ce pourquoi""",
    "es": """a al como con cómo cuál cuando cuándo de del el ella en es esta este esto la las lo los me mi mis
    no o para pero por qué que se si sin sobre su sus también te tu un una uno y ya dónde donde hay""",
    "it": """a ad al alla alle anche che chi ci come con cosa da dal dalla dei del della delle di e è gli ha
    i il in la le lo ma mi ne nel nella non o per perché più quale quando se si sono su sul tra un una uno""",
    "pt": """a ao aos as com como da das de do dos e é ela ele em entre isso isto mais mas na nas no nos o os
    ou para pela pelo por qual quando que se sem ser seu sua são também um uma onde porque""",
    "nl": """aan al als bij dan dat de der des die dit door een en er geen het hij hoe ik in is je kan maar
    met na naar niet nog of om ook op over te tot uit van voor waarom wat wie wij zal ze zich zijn""",
    "sv": """att av de den det du en ett för från har hur i jag kan med men när och om på som till var vad
    vi är vilken varför""",
    "da": """af at de den der det du en er et for fra har hvad hvordan hvorfor i jeg kan med og om på som til""",
    "no": """av at de den det du en er et for fra har hva hvordan hvorfor i jeg kan med og om på som til""",
    "ru": """а без в во вы где да для до его ее её если же за и из или их как какой когда кто ли на не него
    нет но о об он она они от по почему при с со так то у что чтобы это я""",
}
STOPWORDS: dict[str, frozenset[str]] = {code: frozenset(words.split()) for code, words in _LISTS.items()}
NONE: frozenset[str] = frozenset()


def stopwords(language: str) -> frozenset[str]:
    """The stopwords of ``language`` (lower case, as written: before stemming); none for others."""
    return STOPWORDS.get(language, NONE)
