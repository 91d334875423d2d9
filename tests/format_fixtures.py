"""Small documents of every format, made by the tests: PDF (written by hand, outlined and encrypted
with pypdf), Word (zipped XML), notebooks, HTML, reST, code; and hostile files of each kind."""

from __future__ import annotations

import io
import json
import zipfile
from collections.abc import Sequence

# ---------------------------------------------------------------- PDF


def _escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def pdf(pages: Sequence[Sequence[str]], title: str | None = None) -> bytes:
    """A PDF with one page per item, each line of it drawn in Helvetica."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>", "", "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>"]
    kids = []
    for lines in pages:
        stream = "BT /F1 11 Tf 14 TL 72 760 Td " + " ".join(f"({_escape(line)}) Tj T*" for line in lines) + " ET"
        objects.append(f"<< /Length {len(stream.encode('latin-1'))} >>\nstream\n{stream}\nendstream")
        content = len(objects)
        objects.append(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] "
            f"/Resources << /Font << /F1 3 0 R >> >> /Contents {content} 0 R >>"
        )
        kids.append(f"{len(objects)} 0 R")
    objects[1] = f"<< /Type /Pages /Kids [{' '.join(kids)}] /Count {len(kids)} >>"
    info = None
    if title is not None:
        objects.append(f"<< /Title ({_escape(title)}) >>")
        info = len(objects)
    out = io.BytesIO()
    out.write(b"%PDF-1.4\n")
    offsets = []
    for n, body in enumerate(objects, 1):
        offsets.append(out.tell())
        out.write(f"{n} 0 obj\n{body}\nendobj\n".encode("latin-1"))
    xref = out.tell()
    out.write(f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode())
    for offset in offsets:
        out.write(f"{offset:010d} 00000 n \n".encode())
    trailer = f"<< /Size {len(objects) + 1} /Root 1 0 R" + (f" /Info {info} 0 R" if info else "") + " >>"
    out.write(f"trailer\n{trailer}\nstartxref\n{xref}\n%%EOF\n".encode())
    return out.getvalue()


def pdf_with_outline(data: bytes, outline: Sequence[tuple[str, int, int]]) -> bytes:
    """``data`` with bookmarks: (title, page from 0, level from 1), in order."""
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    parents: dict[int, object] = {}
    for title, page, level in outline:
        parents[level] = writer.add_outline_item(title=title, page_number=page, parent=parents.get(level - 1))
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def encrypted_pdf(data: bytes, user_password: str) -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(data)))
    writer.encrypt(user_password=user_password, owner_password="owner", algorithm="AES-256")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


# ---------------------------------------------------------------- Word

_W = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'
_CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="xml" ContentType="application/xml"/></Types>'
)
# Localised style ids (a German Word) whose names are the built-in English ones.
_STYLES = (
    f'<?xml version="1.0" encoding="UTF-8"?><w:styles {_W}>'
    '<w:style w:type="paragraph" w:styleId="berschrift1"><w:name w:val="heading 1"/></w:style>'
    '<w:style w:type="paragraph" w:styleId="berschrift2"><w:name w:val="heading 2"/></w:style>'
    '<w:style w:type="paragraph" w:styleId="Titel"><w:name w:val="Title"/></w:style>'
    "</w:styles>"
)
_STYLE_IDS = {"h1": "berschrift1", "h2": "berschrift2", "title": "Titel"}


def _xml_text(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def docx(blocks: Sequence[tuple[str, object]]) -> bytes:
    """A .docx of blocks: ("p" | "h1" | "h2" | "title", text) or ("table", [[cell, ...], ...])."""
    body = []
    for kind, value in blocks:
        if kind == "table":
            rows = "".join(
                "<w:tr>"
                + "".join(f"<w:tc><w:p><w:r><w:t>{_xml_text(c)}</w:t></w:r></w:p></w:tc>" for c in row)
                + "</w:tr>"
                for row in value  # type: ignore[attr-defined]
            )
            body.append(f"<w:tbl>{rows}</w:tbl>")
        else:
            style = f'<w:pPr><w:pStyle w:val="{_STYLE_IDS[kind]}"/></w:pPr>' if kind in _STYLE_IDS else ""
            body.append(f"<w:p>{style}<w:r><w:t>{_xml_text(str(value))}</w:t></w:r></w:p>")
    document = f'<?xml version="1.0" encoding="UTF-8"?><w:document {_W}><w:body>{"".join(body)}</w:body></w:document>'
    return zipped({"[Content_Types].xml": _CONTENT_TYPES, "word/styles.xml": _STYLES, "word/document.xml": document})


def zipped(parts: dict[str, str | bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in parts.items():
            z.writestr(name, data)
    return out.getvalue()


def docx_bomb(unpacked_mib: int) -> bytes:
    """A .docx whose document.xml inflates to ``unpacked_mib`` MiB of spaces (written in 1 MiB pieces)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("[Content_Types].xml", _CONTENT_TYPES)
        with z.open("word/document.xml", "w", force_zip64=True) as f:
            f.write(f"<w:document {_W}><w:body><w:p><w:r><w:t>".encode())
            block = b" " * (1 << 20)
            for _ in range(unpacked_mib):
                f.write(block)
            f.write(b"</w:t></w:r></w:p></w:body></w:document>")
    return out.getvalue()


# ---------------------------------------------------------------- notebooks


def notebook(cells: Sequence[tuple[str, str]], outputs: Sequence[str] = (), language: str = "python") -> bytes:
    """An nbformat-4 notebook of (cell type, source) cells; ``outputs`` go on the first code cell."""
    nb_cells = []
    for kind, source in cells:
        cell: dict[str, object] = {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True)}
        if kind == "code":
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": o} for o in outputs]
            cell["execution_count"] = 1
            outputs = ()
        nb_cells.append(cell)
    meta = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": language}}
    return json.dumps({"cells": nb_cells, "metadata": meta, "nbformat": 4, "nbformat_minor": 5}).encode()
