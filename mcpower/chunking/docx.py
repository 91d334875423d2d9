"""Word (.docx): the document's paragraphs and tables, read from the archive with zipfile and
defusedxml (no DTDs, no entities).

- Headings come from paragraph styles: a style named "heading 1" ... "heading 9" (Word's built-in
  names are English in every language; the style *id* is localised, so ids are resolved to names
  through word/styles.xml), or an outline level set on the paragraph or along its style's basedOn
  chain. A "Title" paragraph gives the title when the document properties have none.
- A table becomes one line per row, cells joined with " | "; content controls are read through.
- The archive is checked before anything is inflated: at most 10,000 entries, 256 MiB unpacked in
  all (by the sizes it declares, which zipfile never reads past), no part over 64 MiB, and no part
  over 1 MiB that inflates more than 200 times: zip bombs and damaged archives are refused with
  the reason.
"""

from __future__ import annotations

import io
import re
import zipfile
from typing import Any

from mcpower.chunking.extracted import TextBuilder
from mcpower.chunking.sections import Parsed, UnreadableError

TYPES = frozenset({".docx"})

MAX_ENTRIES = 10_000
MAX_UNPACKED = 256 * 1024 * 1024
MAX_PART = 64 * 1024 * 1024
MAX_RATIO = 200  # Word's XML compresses 5-20 times; a bomb, thousands of times
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_DC_TITLE = "{http://purl.org/dc/elements/1.1/}title"
_HEADING_STYLE = re.compile(r"heading\s*([1-9])", re.I)
_CONTAINERS = frozenset({_W + "sdt", _W + "sdtContent", _W + "customXml", _W + "smartTag", _W + "ins"})


def extract(data: bytes) -> Parsed:
    """The document's text, with its headings.

    Raises:
        UnreadableError: not a Word document, a zip bomb, damaged, or XML with a DTD.
    """
    archive = _open(data)
    body = _xml(archive, "word/document.xml")
    styles = _styles(_xml(archive, "word/styles.xml") if "word/styles.xml" in archive.namelist() else None)
    core = _xml(archive, "docProps/core.xml") if "docProps/core.xml" in archive.namelist() else None
    title_el = core.find(_DC_TITLE) if core is not None else None
    title = " ".join((title_el.text or "").split()) if title_el is not None else ""
    builder = TextBuilder()
    root = body.find(_W + "body")
    stack = list(reversed(list(root))) if root is not None else []
    while stack:  # document order, iteratively
        el = stack.pop()
        if el.tag == _W + "p":
            text = _paragraph_text(el).strip()
            if not text:
                continue
            level = _level(el, styles)
            if level == 0:
                title = title or " ".join(text.split())
            elif level:
                builder.heading(level, text)
            else:
                builder.paragraph(text)
        elif el.tag == _W + "tbl":
            rows = [
                [" ".join(_paragraph_text(p) for p in cell.iter(_W + "p")) for cell in row.findall(_W + "tc")]
                for row in el.iter(_W + "tr")  # a nested table's rows join the outer table's
            ]
            builder.table(rows)
        elif el.tag in _CONTAINERS:
            stack.extend(reversed(list(el)))
    return builder.build(title or None)


def _open(data: bytes) -> zipfile.ZipFile:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as e:
        raise UnreadableError(f"not a valid zip archive, so not a Word document ({e})") from e
    if len(infos) > MAX_ENTRIES:
        raise UnreadableError(f"archive has {len(infos)} entries, over the limit of {MAX_ENTRIES}")
    total = sum(i.file_size for i in infos)
    if total > MAX_UNPACKED:
        raise UnreadableError(f"archive would unpack to {total >> 20} MiB, over the {MAX_UNPACKED >> 20} MiB limit")
    for i in infos:
        if i.file_size > 1 << 20 and i.file_size > MAX_RATIO * max(i.compress_size, 1):
            ratio = i.file_size // max(i.compress_size, 1)
            raise UnreadableError(f"{i.filename[:80]} inflates {ratio} times (a zip bomb?)")
    if "word/document.xml" not in archive.namelist():
        raise UnreadableError("no word/document.xml in the archive: not a Word document")
    return archive


def _xml(archive: zipfile.ZipFile, name: str) -> Any:
    import defusedxml.ElementTree
    from defusedxml import DefusedXmlException

    try:
        with archive.open(name) as f:
            data = f.read(MAX_PART + 1)  # never more than the declared size: zipfile checks it
    except (zipfile.BadZipFile, OSError, ValueError, NotImplementedError, EOFError) as e:
        raise UnreadableError(f"damaged archive: {name} cannot be read ({e})") from e
    if len(data) > MAX_PART:
        raise UnreadableError(f"{name} is over {MAX_PART >> 20} MiB")
    try:
        return defusedxml.ElementTree.fromstring(data, forbid_dtd=True)
    except DefusedXmlException as e:
        raise UnreadableError(f"{name} has a DTD or entities, which Word never writes ({type(e).__name__})") from e
    except defusedxml.ElementTree.ParseError as e:
        raise UnreadableError(f"malformed XML in {name}: {e}") from e


def _styles(root: Any) -> dict[str, tuple[str, int | None, str | None]]:
    """Style id -> (name, outline level or None, the style it is based on)."""
    found: dict[str, tuple[str, int | None, str | None]] = {}
    for style in root.iter(_W + "style") if root is not None else ():
        sid = style.get(_W + "styleId")
        if not sid:
            continue
        name = style.find(_W + "name")
        level = style.find(f"{_W}pPr/{_W}outlineLvl")
        based = style.find(_W + "basedOn")
        found[sid] = (
            name.get(_W + "val", sid) if name is not None else sid,
            _int(level.get(_W + "val")) if level is not None else None,
            based.get(_W + "val") if based is not None else None,
        )
    return found


def _level(p: Any, styles: dict[str, tuple[str, int | None, str | None]]) -> int | None:
    """A paragraph's heading level (1-9), 0 for a Title, None for body text."""
    direct = p.find(f"{_W}pPr/{_W}outlineLvl")
    if direct is not None and (level := _int(direct.get(_W + "val"))) is not None and level < 9:
        return level + 1
    style = p.find(f"{_W}pPr/{_W}pStyle")
    sid = style.get(_W + "val") if style is not None else None
    seen: set[str] = set()
    while sid and sid not in seen:  # along the basedOn chain, which a damaged file may loop
        seen.add(sid)
        name, outline, based = styles.get(sid, (sid, None, None))
        if m := _HEADING_STYLE.fullmatch(str(name).strip()):
            return int(m.group(1))
        if str(name).strip().lower() == "title":
            return 0
        if outline is not None and outline < 9:
            return int(outline) + 1
        sid = based
    return None


def _paragraph_text(p: Any) -> str:
    parts = []
    for el in p.iter():
        if el.tag == _W + "t":
            parts.append(el.text or "")
        elif el.tag == _W + "tab":
            parts.append("\t")
        elif el.tag in (_W + "br", _W + "cr"):
            parts.append("\n")
    return "".join(parts)


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
