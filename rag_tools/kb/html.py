"""HTML pages as the page says them: the main content, in sections under their heading paths.

Real sites and documentation generators (Sphinx, DocBook, MkDocs, hand-written pages) wrap the
content in navigation bars, breadcrumbs, sidebars and "Prev / Up / Next" tables, wrap their source
lines anywhere inside a paragraph, and keep API entries in definition lists rather than under
headings. This reader, on ``lxml``'s HTML parser:

- leaves out what is not content: scripts, forms, ``nav``/``aside``, the page's own header and
  footer, ARIA navigation roles, elements whose class or id names navigation (``navheader``,
  ``breadcrumb``, ``sphinxsidebar``, ...), hidden elements, and lists or tables that are mostly
  links (a table of contents, a "Prev / Next" bar);
- takes the main content (``main``, ``role=main``, one ``article``) when the page marks it;
- writes each paragraph as one line, whitespace collapsed, with inline code in backticks and no
  Markdown escapes;
- keeps headings as the section path, code blocks fenced as they are, tables as Markdown tables
  under their header row (the chunker keeps that row on every chunk of a table), lists as lists,
  and definition lists as ``term: definition``; an entry whose definition is long (a function's
  documentation) becomes a section of its own under its term.

Why not a main-content library (``trafilatura``) or ``markdownify``: ``rag_tools/kb/NOTES.md``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field

from lxml import etree

from .parsed import ParsedDocument, Section

__all__ = ["parse_html"]

# Elements that never hold content a reader came for.
_DROP = frozenset(
    "script style noscript template svg math nav aside form button select input textarea iframe object "
    "embed canvas map dialog link meta head".split()
)
_ROLES = frozenset("navigation banner contentinfo search complementary menu menubar toolbar tablist".split())
# Words in a class or id that name navigation or chrome rather than content.
_CHROME_WORDS = frozenset(
    "nav navbar navigation navheader navfooter navlinks menu mainmenu submenu breadcrumb breadcrumbs "
    "crumbs sidebar sphinxsidebar sphinxsidebarwrapper related footer tagline banner pagination pager "
    "skiplink skip-link nosearch noindex noprint searchbox searchmenu cookie cookies share social "
    "headerlink hash-link anchorlink permalink edit-this-page toc-backref masthead topbar".split()
)
_ADMONITIONS = frozenset(
    "note warning tip caution important admonition hint seealso attention danger error".split()
)
_PERMALINK_TEXT = frozenset({"¶", "#", "§", "🔗"})
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_BLOCKS = frozenset(
    "p div section article main blockquote pre ul ol li dl dt dd table thead tbody tfoot tr td th "
    "caption figure figcaption details summary address center header footer fieldset hr body html "
    "h1 h2 h3 h4 h5 h6 legend".split()
)
_CODE = frozenset({"code", "tt", "kbd", "samp", "var"})
_LINK_DENSE = 0.6  # share of a list's or table's text that is link text above which it is navigation
_LONG_DEFINITION = 600  # characters of a definition above which its entry is a section of its own
_SPACE = re.compile(r"\s+")
_XML_DECLARATION = re.compile(r"^\s*<\?xml[^>]*\?>", re.IGNORECASE)
_WORD_SPLIT = re.compile(r"[\s_]+")


def parse_html(html: str, fallback_title: str) -> ParsedDocument:
    """An HTML page's title and main content as sections (text in light Markdown, no escapes)."""
    root = _document(html)
    if root is None:
        return ParsedDocument(fallback_title, "html", "", [])
    title_element = root.find(".//title")
    page_title = _collapse(_text(title_element)) if title_element is not None else ""
    main = _main(root, chrome=True)
    sections = _Reader().read(main)
    navigation = False
    if not sections:  # all navigation, or empty: its heading is found where its link lists are
        fresh = _document(html)
        main = _main(fresh if fresh is not None else root, chrome=False)
        navigation = bool(_Reader().read(main))
    h1s = main.findall(".//h1")  # one h1 names the page; several are its sections (SQLite's pages)
    title = (_inline_text(h1s[0]) if len(h1s) == 1 else "") or page_title or fallback_title
    if navigation:
        # a page that is all navigation (an index, a table of contents) is a document of its title:
        # listed and opened like any page, but its link lists, which outranked the pages they point
        # to in search (bench/RESULTS.md, "Real manuals"), are not indexed
        sections = [Section(title)]
    content = "\n\n".join(_render_section(s) for s in sections)
    return ParsedDocument(title, "html", content, sections)


def _document(html: str) -> etree._Element | None:
    text = _XML_DECLARATION.sub("", html, count=1)
    if not text.strip():
        return None
    try:
        return etree.fromstring(text, _PARSER)
    except (etree.ParserError, etree.XMLSyntaxError, ValueError):
        return None


# Plain elements (not ``lxml.html``'s classes, whose lookup costs a third of the parse); comments
# and processing instructions are not content.
_PARSER = etree.HTMLParser(remove_comments=True, remove_pis=True)


def _text(element: etree._Element) -> str:
    """All the text inside ``element`` (``lxml.html``'s ``text_content``)."""
    return "".join(element.itertext())


def _remove(element: etree._Element) -> None:
    """Take ``element`` out of the tree, keeping the text that follows it."""
    parent = element.getparent()
    if parent is None:
        return
    if element.tail:
        previous = element.getprevious()
        if previous is not None:
            previous.tail = (previous.tail or "") + element.tail
        else:
            parent.text = (parent.text or "") + element.tail
    parent.remove(element)


def _main(root: etree._Element, *, chrome: bool) -> etree._Element:
    """The element holding the page's main content, with what is not content removed (in place)."""
    _drop(root, chrome=chrome)
    body = root.find("body")
    scope = body if body is not None else root
    for path in (".//main", ".//*[@role='main']"):
        found = scope.find(path)
        if found is not None and _collapse(_text(found)):
            return found
    articles = scope.findall(".//article")
    if len(articles) == 1 and _collapse(_text(articles[0])):
        return articles[0]
    return scope


def _drop(element: etree._Element, *, chrome: bool) -> None:
    """Remove the parts of ``element`` that are not content, top down (a dropped part is not walked)."""
    for child in list(element):
        if _is_dropped(child, chrome=chrome):
            _remove(child)
        else:
            _drop(child, chrome=chrome)


def _is_dropped(element: etree._Element, *, chrome: bool) -> bool:
    tag = element.tag
    if not isinstance(tag, str):
        return True  # comments and processing instructions
    if tag in _DROP and not (tag == "aside" and _words(element) & _ADMONITIONS):
        return True
    if element.get("hidden") is not None or element.get("aria-hidden") == "true":
        return True
    if (element.get("role") or "").lower() in _ROLES:
        return True
    if tag == "a" and _is_permalink(element):
        return True
    if not chrome:
        return False
    if tag in ("header", "footer") and not _inside(element, ("article", "main")):
        return True
    words = _words(element)
    if words & _CHROME_WORDS:
        return True
    return tag in ("ul", "ol", "table", "div", "p") and not words & _ADMONITIONS and _mostly_links(element)


def _is_permalink(anchor: etree._Element) -> bool:
    words = _words(anchor)
    return bool(words & {"headerlink", "hash-link", "anchorlink", "permalink", "anchor"}) or (
        _collapse(_text(anchor)) in _PERMALINK_TEXT
    )


def _words(element: etree._Element) -> set[str]:
    value = f"{element.get('class') or ''} {element.get('id') or ''}".lower()
    return {w for w in _WORD_SPLIT.split(value) if w}


def _inside(element: etree._Element, tags: tuple[str, ...]) -> bool:
    parent = element.getparent()
    while parent is not None:
        if parent.tag in tags:
            return True
        parent = parent.getparent()
    return False


def _mostly_links(element: etree._Element) -> bool:
    """Whether a list, table or block is navigation: mostly link text, and no heading or code in it."""
    links = list(element.iter("a"))
    if not links:
        return False
    size = _visible_chars(_text(element))
    if not size or element.find(_NOT_NAVIGATION) is not None:
        return False
    return sum(_visible_chars(_text(a)) for a in links) / size >= _LINK_DENSE


_NOT_NAVIGATION = ".//pre"  # code is content however many links sit around it


def _visible_chars(text: str) -> int:
    return len(text) - sum(text.count(c) for c in " \n\t\r\u00a0")


def _collapse(text: str) -> str:
    return _SPACE.sub(" ", text.replace("\u00a0", " ")).strip()


# -- blocks ------------------------------------------------------------------------------------


@dataclass
class _Table:
    header: list[str] | None
    rows: list[list[str]]
    caption: str = ""


@dataclass
class _Open:
    """The section being filled: its heading path (level, text) and its rendered blocks."""

    path: list[tuple[float, str]]
    blocks: list[str] = field(default_factory=list)


class _Reader:
    """Walks the main content in document order and cuts it into sections at headings."""

    def __init__(self) -> None:
        self.sections: list[Section] = []
        self.current = _Open([])

    def read(self, root: etree._Element) -> list[Section]:
        self._children(root, list_depth=0)
        self._flush()
        return self.sections

    def _flush(self) -> None:
        text = "\n\n".join(b for b in self.current.blocks if b.strip())
        if text.strip():
            self.sections.append(Section(text, [h for _, h in self.current.path]))
        self.current = _Open(list(self.current.path))

    def _heading(self, level: float, text: str) -> None:
        self._flush()
        self.current.path = [(lvl, h) for lvl, h in self.current.path if lvl < level]
        self.current.path.append((level, text))

    def _emit(self, block: str) -> None:
        if block.strip():
            self.current.blocks.append(block)

    def _children(self, element: etree._Element, *, list_depth: int) -> None:
        """Blocks of ``element``'s content: runs of inline content become paragraphs."""
        run: list[str] = [element.text or ""]
        for child in element:
            if not isinstance(child.tag, str):
                run.append(child.tail or "")
                continue
            if child.tag in _BLOCKS:
                self._emit(_collapse("".join(run)))
                run = []
                self._block(child, list_depth=list_depth)
                run.append(child.tail or "")
            else:
                run.append(_inline(child))
                run.append(child.tail or "")
        self._emit(_collapse("".join(run)))

    def _block(self, element: etree._Element, *, list_depth: int) -> None:
        tag = element.tag
        if tag in _HEADINGS:
            text = _inline_text(element).replace("`", "")
            if text:
                self._heading(_HEADINGS[tag], text)
        elif tag == "pre":
            self._emit(_fence(_text(element)))
        elif tag in ("ul", "ol"):
            self._emit("\n".join(_list_lines(element, list_depth)))
        elif tag == "dl":
            self._definitions(element)
        elif tag == "table":
            self._table(element)
        elif tag == "hr":
            return
        elif _words(element) & _ADMONITIONS and tag in ("div", "aside", "section", "blockquote"):
            self._admonition(element)
        else:
            self._children(element, list_depth=list_depth)

    def _admonition(self, element: etree._Element) -> None:
        """A note or warning: its title ("Note") leads its first paragraph instead of starting a section."""
        parts = [
            _inline_text(child) if child.tag in _HEADINGS else _block_text(child)
            for child in element
            if isinstance(child.tag, str)
        ]
        lead = _collapse(element.text or "")
        texts = [t for t in ([lead] if lead else []) + parts if t]
        if not texts:
            return
        first = texts[0].rstrip(":")
        if len(texts) > 1 and len(first) <= 30 and first.lower().rstrip(":") in _ADMONITIONS | {"see also"}:
            texts = [f"{first}: {texts[1]}", *texts[2:]]
        for text in texts:
            self._emit(text)

    def _definitions(self, element: etree._Element) -> None:
        for terms, definition in _entries(element):
            term = "; ".join(t for t in terms if t)
            heading = term.replace("`", "")
            if definition is None:
                self._emit(term)
                continue
            if _visible_chars(_text(definition)) >= _LONG_DEFINITION and term:
                parent = list(self.current.path)
                level = (parent[-1][0] if parent else 0) + 0.5
                self._heading(level, heading)
                self._emit(term)
                self._children(definition, list_depth=0)
                self._flush()
                self.current.path = parent
                continue
            blocks = _definition_blocks(definition)
            if term and blocks and not blocks[0].startswith("```"):
                blocks[0] = f"{term}: {blocks[0]}"
            elif term:
                blocks.insert(0, f"{term}:")
            for block in blocks:
                self._emit(block)

    def _table(self, element: etree._Element) -> None:
        table = _read_table(element)
        if table is not None:
            if table.caption:
                self._emit(table.caption)
            self._emit(_render_table(table))
            return
        # One column (DocBook's catalog and function tables put a row's parts in paragraphs of
        # one cell) or a layout table: each cell is a block, its short paragraphs on one line.
        for row in _rows(element):
            for cell in row:
                blocks = _definition_blocks(cell)
                if len(blocks) > 1 and not any(b.startswith("```") or "\n" in b for b in blocks):
                    blocks = [" — ".join(blocks)]
                for block in blocks:
                    self._emit(block)


def _entries(dl: etree._Element) -> Iterator[tuple[list[str], etree._Element | None]]:
    terms: list[str] = []
    for child in dl:
        if child.tag == "dt":
            terms.append(_signature(child) if "sig" in _words(child) else _inline_text(child))
        elif child.tag == "dd":
            yield terms, child
            terms = []
        elif child.tag == "div":  # HTML allows div-wrapped groups of dt and dd
            yield from _entries(child)
    if terms:
        yield terms, None


def _signature(term: etree._Element) -> str:
    """A Sphinx API entry's term (``<dt class="sig">``: ``daemon``, ``class datetime.timedelta``)
    as the page shows it, one span of code: its definition then opens with code, not in lower case."""
    text = _collapse(_text(term)).rstrip("¶§ ").strip()
    fence = "``" if "`" in text else "`"
    return f"{fence}{text}{fence}" if text else ""


def _definition_blocks(definition: etree._Element) -> list[str]:
    reader = _Reader()
    reader._children(definition, list_depth=0)
    return [b for b in reader.current.blocks if b.strip()]


def _block_text(element: etree._Element) -> str:
    """A block read on its own and joined as paragraphs (for a note's parts)."""
    reader = _Reader()
    reader._block(element, list_depth=0)
    return "\n\n".join(b for b in reader.current.blocks if b.strip())


def _inline(element: etree._Element) -> str:
    """An inline element as text: code in backticks, line breaks as spaces, images by nothing."""
    tag = element.tag
    if tag == "br":
        return " "
    if tag == "img":
        return ""
    if tag in _CODE:  # its text whole: code nested in it (DocBook's <code><em><code>) is not marked again
        inner = _collapse(_text(element))
        if not inner:
            return " "
        fence = "``" if "`" in inner else "`"
        pad = " " if inner.startswith("`") or inner.endswith("`") else ""
        return f"{fence}{pad}{inner}{pad}{fence}"
    return _inline_content(element)


def _inline_content(element: etree._Element) -> str:
    parts = [element.text or ""]
    for child in element:
        if isinstance(child.tag, str):
            parts.append(_inline(child) if child.tag not in _BLOCKS else " " + _block_text(child) + " ")
        parts.append(child.tail or "")
    return "".join(parts)


def _inline_text(element: etree._Element) -> str:
    """An element's text on one line, whitespace collapsed and permalink marks removed."""
    return _collapse(_inline_content(element)).rstrip("¶§ ").strip()


def _fence(code: str) -> str:
    lines = code.replace("\r\n", "\n").replace("\u00a0", " ").split("\n")
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        return ""
    body = "\n".join(line.rstrip() for line in lines)
    fence = "````" if "```" in body else "```"
    return f"{fence}\n{body}\n{fence}"


def _list_lines(element: etree._Element, depth: int) -> list[str]:
    lines: list[str] = []
    ordered = element.tag == "ol"
    number = int(element.get("start") or 1) if ordered and (element.get("start") or "").isdigit() else 1
    for item in element:
        if item.tag != "li":
            continue
        marker = f"{number}." if ordered else "-"
        number += 1
        own: list[str] = [item.text or ""]
        nested: list[str] = []
        for child in item:
            if not isinstance(child.tag, str):
                own.append(child.tail or "")
                continue
            if child.tag in ("ul", "ol"):
                nested += _list_lines(child, depth + 1)
            elif child.tag == "pre":
                code = _fence(_text(child))
                nested += ["  " * (depth + 1) + line for line in code.split("\n")] if code else []
            elif child.tag in _BLOCKS:
                own.append(" " + _block_text(child).replace("\n", " ") + " ")
            else:
                own.append(_inline(child))
            own.append(child.tail or "")
        text = _collapse("".join(own))
        if text:
            lines.append(f"{'  ' * depth}{marker} {text}")
        lines += nested
    return lines


def _cell(cell: etree._Element) -> str:
    return _collapse(_inline_content(cell)).replace("|", "\\|")


def _read_table(element: etree._Element) -> _Table | None:
    """A data table's header and rows; ``None`` for a layout table (one column, or one cell)."""
    caption_element = element.find("caption")
    caption = _inline_text(caption_element) if caption_element is not None else ""
    rows: list[tuple[bool, list[str]]] = []
    for cells in _rows(element):
        tr = cells[0].getparent()
        in_head = tr is not None and tr.getparent() is not None and tr.getparent().tag == "thead"
        rows.append((in_head or all(c.tag == "th" for c in cells), [_cell(c) for c in cells]))
    if not rows or max(len(cells) for _, cells in rows) < 2:
        return None
    header: list[str] | None = None
    body: list[list[str]] = []
    for is_header, cells in rows:
        if is_header and header is None and not body:
            header = cells
        elif is_header and header is not None and not body:
            header = [f"{a} {b}".strip() for a, b in zip(header, cells, strict=False)]
        else:
            body.append(cells)
    return _Table(header, body, caption)


def _rows(table: etree._Element) -> list[list[etree._Element]]:
    """The cells of each row of ``table`` (not of the tables nested in it)."""
    rows = []
    for tr in table.iter("tr"):
        cells = [c for c in tr if c.tag in ("td", "th")]
        if cells and _nearest_table(tr) is table:
            rows.append(cells)
    return rows


def _nearest_table(element: etree._Element) -> etree._Element | None:
    parent = element.getparent()
    while parent is not None and parent.tag != "table":
        parent = parent.getparent()
    return parent


def _render_table(table: _Table) -> str:
    width = max([len(table.header or [])] + [len(r) for r in table.rows])
    if table.header is None:  # no header row: each row a line of cells
        return "\n".join(" | ".join(c for c in row if c) for row in table.rows if any(row))
    header = table.header + [""] * (width - len(table.header))
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    for row in table.rows:
        cells = row + [""] * (width - len(row))
        if any(cells):
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _render_section(section: Section) -> str:
    heading = " / ".join(section.headings)
    return f"{heading}\n\n{section.text}" if heading else section.text
