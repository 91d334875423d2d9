"""reStructuredText (.rst, and .txt files that are reST), parsed with docutils and stored as
readable text.

- Sections give the heading path and the title (the first top-level section), whatever their
  adornment; inline markup in titles and text is rendered: ``\\`\\`name\\`\\``` -> name,
  ``:func:\\`~pkg.mod.f\\``` -> f, ``:ref:\\`the guide <label>\\``` -> the guide, substitutions replaced.
- Literal blocks (``::``, code-block, doctest) are kept whole.
- Directives docutils does not know (Sphinx's and its extensions') neither abort the parse nor
  vanish: their content is kept as text, and those that document a name (function, class,
  attribute, setting, confval, option ...) become sub-headings, so a reference page splits at each
  documented name. Roles docutils does not know render as their text.
- Silent and safe: nothing is printed, no configuration file is read, ``include``, ``raw`` and
  file options read nothing.
- A file docutils cannot parse (too deeply nested, or it fails) is read as plain text, with a note.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from mcpower.chunking import decode_text
from mcpower.chunking.extracted import TextBuilder
from mcpower.chunking.sections import Parsed
from mcpower.chunking.text import parse as parse_plain

TYPES = frozenset({".rst", ".rest"})

# docutils recurses once per level of nesting and holds the whole tree on the way down: past ~160
# levels it fails with RecursionError, and 2,000 levels took 1.8 GB first. Real documents indent
# 8-32 columns; text indented deeper than this is read as plain text without trying.
MAX_INDENT = 400
SETTINGS: dict[str, Any] = {
    "report_level": 3,  # errors stay in the tree (a failed directive keeps its source); nothing is printed
    "halt_level": 5,  # never stop on a message
    "warning_stream": False,  # discard warnings (None would mean stderr)
    "traceback": True,  # raise exceptions instead of printing them and exiting
    "file_insertion_enabled": False,  # include, raw :file:, csv-table :file: read nothing
    "raw_enabled": False,
    "_disable_config": True,  # no docutils.conf from the folder, home or /etc (it could undo the above)
    "line_length_limit": 1_000_000,  # the default 10,000 drops a whole document for one long line
    "syntax_highlight": "none",
    "smart_quotes": False,
    "doctitle_xform": False,  # the top section stays a section (and gives the title)
    "sectsubtitle_xform": False,
    "docinfo_xform": False,
    "pep_references": False,
    "rfc_references": False,
    "input_encoding": "unicode",
}
# Directives that document a name: each becomes a sub-heading (after a domain prefix such as py:).
_OBJECTS = frozenset(
    {"function", "class", "method", "classmethod", "staticmethod", "attribute", "property", "data"}
    | {"exception", "decorator", "decoratormethod", "type", "module", "member", "macro", "struct", "union"}
    | {"enum", "enumerator", "var", "concept", "alias", "describe", "object", "option", "cmdoption", "envvar"}
    | {"program", "confval", "event", "directive", "role", "setting", "templatetag", "templatefilter"}
    | {"fieldlookup", "django-admin", "django-admin-option", "autofunction", "autoclass", "automethod"}
    | {"autoattribute", "autodata", "automodule", "autoexception", "autoproperty", "autodecorator"}
    | {"command", "variable", "genex", "signature"}  # CMake's documentation (cmake: domain)
    | {"get", "post", "put", "patch", "delete", "head"}  # sphinxcontrib-httpdomain (http:get /users/...)
)
# Markers without content (Django's ".. setting:: NAME" before the section that documents it).
_MARKERS = frozenset(
    {"module", "currentmodule", "program", "setting", "templatetag", "templatefilter", "fieldlookup"}
    | {"django-admin", "django-admin-option"}
)
_DROPPED = frozenset(
    {"toctree", "index", "highlight", "tabularcolumns", "autosummary", "literalinclude", "sectionauthor"}
    | {"moduleauthor", "codeauthor", "default-role", "default-domain", "currentmodule", "include"}
)
_LITERAL = frozenset(
    {"code-block", "sourcecode", "doctest", "testcode", "testoutput", "testsetup", "testcleanup"}
    | {"productionlist", "jupyter-execute", "ipython", "prompt"}
)
# Sphinx's file-wide metadata (a field list before the first section): says nothing about the text.
_METADATA = frozenset({"orphan", "nocomments", "nosearch", "tocdepth"})
# A role's "Title <target>": the target is after the last "<" (the title is cut before it, in
# Python: "^(.+?)\s*<" was quadratic in a run of spaces).
_TARGET = re.compile(r"<([^<>]+)>\n?\Z")


def extract(data: bytes) -> Parsed:
    """The document as readable text, with its sections; plain text if docutils cannot parse it.

    Raises:
        UnreadableError: not UTF-8, or binary.
    """
    source = decode_text(data).replace("\r\n", "\n").replace("\r", "\n")
    lines = source.split("\n")
    if max((len(line) - len(line.lstrip()) for line in lines), default=0) > MAX_INDENT:
        return _plain(source, f"indented more than {MAX_INDENT} columns")
    try:
        parsed = _render(_doctree(source))
    except RecursionError:
        return _plain(source, "nested too deeply for the reST parser")
    except Exception as e:  # docutils on arbitrary input: any failure reads the file as plain text
        return _plain(source, f"the reST parser failed ({type(e).__name__})")
    if not (parsed.text or "").strip() and source.strip():
        return _plain(source, "the reST parser found no content")
    return parsed


def _plain(source: str, why: str) -> Parsed:
    parsed = parse_plain(source)
    return Parsed(parsed.sections, parsed.title, source, notes=(f"read as plain text: {why}",))


def _doctree(source: str) -> Any:
    from docutils.core import publish_doctree
    from docutils.parsers.rst import Parser, states

    inliner = states.Inliner()
    setup = inliner.init_customizations

    def init_customizations(settings: Any) -> None:
        setup(settings)
        # Standalone URIs and e-mail addresses would become links with the same text, and their
        # pattern was quadratic in a run of their characters (0.7 s for 8 KB of "{#", 17 s for 96 KB).
        inliner.implicit_dispatch = []

    inliner.init_customizations = init_customizations
    with _lenient_lookups():
        return publish_doctree(source, parser=Parser(inliner=inliner), settings_overrides=SETTINGS)


# ---------------------------------------------------------------- unknown directives and roles


@contextmanager
def _lenient_lookups() -> Iterator[None]:
    """docutils looks directives and roles up through two module functions at parse time: wrap them
    (as Sphinx does) so unknown names get the generic ones, and known directives accept the options
    Sphinx adds (:linenos:, :caption: ...) instead of failing and dropping their content."""
    from docutils.parsers.rst import directives, roles

    original_directive, original_role = directives.directive, roles.role

    def directive(name: str, language: Any, document: Any) -> tuple[Any, list[Any]]:
        cls, messages = original_directive(name, language, document)
        if cls is None:
            return _generic_directive(), []
        if cls.option_spec:
            if cls not in _LENIENT:
                _LENIENT[cls] = type(cls.__name__, (cls,), {"option_spec": _lenient_spec(cls.option_spec)})
            cls = _LENIENT[cls]
        return cls, messages

    def role(name: str, language: Any, lineno: int, reporter: Any) -> tuple[Any, list[Any]]:
        fn, messages = original_role(name, language, lineno, reporter)
        return (fn, messages) if fn is not None else (_generic_role, [])

    directives.directive, roles.role = directive, role
    try:
        yield
    finally:
        directives.directive, roles.role = original_directive, original_role


def _lenient_spec(spec: dict[str, Callable[[str], Any]]) -> dict[str, Callable[[str], Any]]:
    from docutils.parsers.rst import directives

    class Lenient(dict[str, Callable[[str], Any]]):
        def __bool__(self) -> bool:
            return True

        def __contains__(self, key: object) -> bool:
            return True

        def __getitem__(self, key: str) -> Callable[[str], Any]:
            found: Callable[[str], Any] = dict.get(self, key, directives.unchanged)
            return found

        def get(self, key: str, default: Any = None) -> Callable[[str], Any]:
            return self[key]

    return Lenient(spec)


_GENERIC: list[Any] = []
_LENIENT: dict[Any, Any] = {}  # a known directive -> its subclass that accepts any option


def _generic_directive() -> Any:
    """The directive class for names docutils does not know (built once, when docutils is loaded)."""
    if _GENERIC:
        return _GENERIC[0]
    from docutils import nodes
    from docutils.parsers.rst import Directive

    class Generic(Directive):  # type: ignore[misc]
        optional_arguments = 1
        final_argument_whitespace = True
        has_content = True
        option_spec = _lenient_spec({})

        def run(self) -> list[Any]:
            name = self.name.lower().rsplit(":", 1)[-1]
            argument = self.arguments[0] if self.arguments else ""
            if name in _DROPPED:
                return []
            if name in _LITERAL:
                text = "\n".join(self.content)
                return [nodes.literal_block(text, text)]
            node = nodes.container(classes=["mcpower-directive"], directive=name, argument=argument)
            if name in _OBJECTS:
                if not self.content and name in _MARKERS:
                    return []
                node["object"] = " ".join(argument.split("\n")[0].split())
            elif argument:
                inline, _messages = self.state.inline_text(argument, self.lineno)
                node += nodes.paragraph(argument, "", nodes.Text(f"{name}: "), *inline)
            self.state.nested_parse(self.content, self.content_offset, node)
            return [node]

    _GENERIC.append(Generic)
    return Generic


def _generic_role(
    name: str, rawtext: str, text: str, lineno: int, inliner: Any, options: Any = None, content: Any = None
) -> tuple[list[Any], list[Any]]:
    """An unknown role as its readable text: 'Title <target>' -> Title, '~a.b.c' -> c, '!x' -> x."""
    from docutils import nodes
    from docutils.utils import unescape

    text = unescape(text)
    m = _TARGET.search(text)
    if m and m.start() > 0:  # the title: what comes before, without the whitespace before "<"
        text = text[: m.start()].rstrip() or text[0]
    else:
        text = text.lstrip("!")
        if text.startswith("~"):
            text = text[1:].rsplit(".", 1)[-1]
    return [nodes.literal(rawtext, text)], []


# ---------------------------------------------------------------- the tree as text


def _render(doc: Any) -> Parsed:
    """Walk the doctree in order (iteratively) into text and sections."""
    from docutils import nodes

    skipped: tuple[Any, ...] = (nodes.comment, nodes.substitution_definition, nodes.target, nodes.pending)
    skipped += (nodes.raw, nodes.Invisible, nodes.transition, nodes.image, nodes.system_message)
    prose: tuple[Any, ...] = (nodes.paragraph, nodes.rubric, nodes.line_block, nodes.attribution, nodes.caption)
    prose += (nodes.title, nodes.term, nodes.field_name, nodes.classifier, nodes.Text)
    builder = TextBuilder()
    title = None
    stack: list[tuple[Any, int, str]] = [(child, 0, "") for child in reversed(doc.children)]
    while stack:
        node, level, prefix = stack.pop()
        if isinstance(node, nodes.system_message):
            # A directive docutils could not run (an error): its source is the message's literal block.
            literal = node.next_node(nodes.literal_block)
            if node.get("level", 0) >= 3 and literal is not None:
                builder.code(literal.astext())
            continue
        if isinstance(node, skipped) or (isinstance(node, nodes.topic) and "contents" in node["classes"]):
            continue
        if isinstance(node, nodes.field_list) and level == 0 and _metadata(node):
            continue
        if isinstance(node, nodes.section) and node.children and isinstance(node[0], nodes.title):
            text = " ".join(node[0].astext().split())
            title = title or (text if level == 0 else None)
            builder.heading(level + 1, text)
            stack.extend((c, level + 1, "") for c in reversed(node.children[1:]))
        elif isinstance(node, nodes.container) and node.get("object"):
            builder.heading(level + 1, node["object"])
            stack.extend((c, level + 1, "") for c in reversed(node.children))
        elif isinstance(node, (nodes.literal_block, nodes.doctest_block, nodes.math_block)):
            builder.code(node.astext())
        elif isinstance(node, nodes.table):
            builder.table([[entry.astext() for entry in row.children] for row in node.findall(nodes.row)])
        elif isinstance(node, (prose, nodes.Text)):
            builder.paragraph(prefix + " ".join(node.astext().split()))
        else:
            stack.extend(reversed(list(_children(node, level, prefix))))
    return builder.build(title)


def _metadata(fields: Any) -> bool:
    """Whether a field list is Sphinx's file-wide metadata (``:orphan:``, ``:tocdepth: 2`` ...)."""
    names = [" ".join(field[0].astext().split()).lower() for field in fields.children if field.children]
    return bool(names) and all(name in _METADATA for name in names)


def _children(node: Any, level: int, prefix: str) -> Iterator[tuple[Any, int, str]]:
    """A container's children, the first carrying the prefix it should start with (a list item's
    bullet, an admonition's kind)."""
    from docutils import nodes

    if isinstance(node, nodes.Admonition) and not isinstance(node, nodes.admonition):
        prefix = f"{prefix}{node.tagname.capitalize()}: "
    for n, child in enumerate(node.children):
        if isinstance(child, nodes.list_item):
            mark = f"{n + 1}. " if isinstance(node, nodes.enumerated_list) else "- "
            yield child, level, mark
        else:
            yield child, level, prefix if n == 0 else ""
