"""HTML pages read as the page says them: main content only, whole paragraphs, tables under their
headers, code as code, definition lists as ``term: definition``, no Markdown escapes.

The pages below copy the markup of the generators that real manuals come from (DocBook, as in the
PostgreSQL manual; Sphinx, as in Python's; SQLite's hand-made pages; a site with ``nav``, breadcrumbs
and a footer); the last tests read the real manuals Debian ships (``scripts/test.sh`` installs them).
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from rag_tools.kb import KnowledgeBase
from rag_tools.kb.chunking import MIN_SECTION_CHARS, chunk_document
from rag_tools.kb.ingestion import search_text
from rag_tools.kb.readers import ParsedDocument, parse_document

DOCBOOK = """<?xml version="1.0" encoding="UTF-8" standalone="no"?>
<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.0 Transitional//EN" "http://www.w3.org/TR/xhtml1/DTD/xhtml1-transitional.dtd">
<html xmlns="http://www.w3.org/1999/xhtml"><head><title>VACUUM</title></head>
<body id="docContent"><div class="navheader"><table width="100%" summary="Navigation header">
<tr><th colspan="5" align="center">VACUUM</th></tr><tr><td><a accesskey="p" href="sql-update.html">Prev</a> </td>
<td><a accesskey="u" href="sql-commands.html">Up</a></td><th width="60%" align="center">SQL Commands</th>
<td><a accesskey="h" href="index.html">Home</a></td><td> <a accesskey="n" href="sql-values.html">Next</a></td></tr>
</table><hr /></div>
<div class="refentry"><div class="refnamediv"><h2><span class="refentrytitle">VACUUM</span></h2>
<p>VACUUM — garbage-collect and optionally analyze a database</p></div>
<div class="refsynopsisdiv"><h2>Synopsis</h2><pre class="synopsis">
VACUUM [ FULL ] [ FREEZE ] [ VERBOSE ] [ <em class="replaceable"><code>table_name</code></em> ]

where option can be one of:

    FULL [ <em class="replaceable"><code>boolean</code></em> ]
</pre></div>
<div class="refsect1"><h2>Description</h2><p>
   Plain <code class="command">VACUUM</code> (without <code class="literal">FULL</code>) simply reclaims
   space and makes it
   available for re-use.  <code class="command">VACUUM FULL</code> rewrites
   the entire contents of the table into a new disk file with no extra space,
   allowing unused space to be returned to the operating system.
  </p>
<div class="note"><h3 class="title">Note</h3><p>Run <code class="filename">pg_checksums</code> and
  <code class="filename">pg_receivewal</code> only on a stopped cluster.</p></div></div>
<div class="refsect1"><h2>Parameters</h2><div class="variablelist"><dl class="variablelist">
<dt><span class="term"><code class="literal">FULL</code></span></dt><dd><p>
   Selects <span class="quote">“<span class="quote">full</span>”</span> vacuum, which can reclaim more
   space, but takes much longer and exclusively locks the table.</p></dd>
<dt><span class="term"><code class="literal">VERBOSE</code></span></dt><dd><p>Prints a detailed vacuum
   activity report for each table.</p></dd></dl></div></div>
<div class="table"><p class="title"><strong>Table 8.2. Numeric Types</strong></p>
<table class="table" summary="Numeric Types" border="1"><thead><tr><th>Name</th><th>Storage Size</th>
<th>Description</th><th>Range</th></tr></thead><tbody>
<tr><td><code class="type">smallint</code></td><td>2 bytes</td><td>small-range integer</td><td>-32768 to +32767</td></tr>
<tr><td><code class="type">bigint</code></td><td>8 bytes</td><td>large-range
 integer</td><td>-9223372036854775808 to +9223372036854775807</td></tr>
<tr><td><code class="literal">a || b</code></td><td>variable</td><td>concatenation</td><td>any</td></tr>
</tbody></table></div></div>
<div class="navfooter"><hr /><table width="100%" summary="Navigation footer"><tr>
<td width="40%" align="left"><a accesskey="p" href="sql-update.html">Prev</a> </td>
<td width="20%" align="center"><a accesskey="u" href="sql-commands.html">Up</a></td>
<td width="40%" align="right"> <a accesskey="n" href="sql-values.html">Next</a></td></tr>
<tr><td width="40%" align="left" valign="top">UPDATE </td><td width="20%" align="center">
<a accesskey="h" href="index.html">Home</a></td><td width="40%" align="right" valign="top"> VALUES</td></tr>
</table></div></body></html>"""

SPHINX = (
    """<!DOCTYPE html><html><head><title>Built-in Functions &#8212; Python 3.11.2 documentation</title></head>
<body><div class="related" role="navigation" aria-label="related navigation"><h3>Navigation</h3><ul>
<li class="right"><a href="../genindex.html" title="General Index">index</a></li>
<li><a href="../index.html">3.11.2 Documentation</a> &#187;</li></ul></div>
<div class="document"><div class="documentwrapper"><div class="bodywrapper"><div class="body" role="main">
<section id="built-in-functions"><h1>Built-in Functions<a class="headerlink" href="#built-in-functions"
 title="Permalink to this heading">¶</a></h1>
<p>The Python interpreter has a number of functions and types built into it that are always
available.</p>
<dl class="py function"><dt class="sig sig-object py" id="abs"><span class="sig-name descname"><span class="pre">abs</span></span><span class="sig-paren">(</span><em class="sig-param"><span class="n"><span class="pre">x</span></span></em><span class="sig-paren">)</span><a class="headerlink" href="#abs">¶</a></dt>
<dd><p>Return the absolute value of a number.  The argument may be an integer, a floating point
number, or an object implementing <a class="reference internal" href="#abs"><code class="xref py py-meth
 docutils literal notranslate"><span class="pre">__abs__()</span></code></a>.</p></dd></dl>
<dl class="py function"><dt class="sig sig-object py" id="open"><span class="sig-name descname"><span class="pre">open</span></span><span class="sig-paren">(</span><em class="sig-param">file</em>,
<em class="sig-param">*args</em>, <em class="sig-param">**kwargs</em><span class="sig-paren">)</span></dt>
<dd><p>Open <em>file</em> and return a corresponding file object.  If the file cannot be opened, an
<code class="docutils literal notranslate"><span class="pre">OSError</span></code> is raised.</p>
<p>"""
    + (
        "The mode_name argument is an optional string that specifies the mode in which the file is opened. "
        * 8
    )
    + """</p>
<div class="highlight-python3 notranslate"><div class="highlight"><pre><span></span><span class="k">with</span> <span class="nb">open</span><span class="p">(</span><span class="s1">'spam.txt'</span><span class="p">)</span> <span class="k">as</span> <span class="n">f</span><span class="p">:</span>
    <span class="n">data</span> <span class="o">=</span> <span class="n">f</span><span class="o">.</span><span class="n">read</span><span class="p">()</span>
</pre></div></div>
</dd></dl>
<p>Functions that take *args and **kwargs accept any_number of arguments.</p>
<div class="admonition note"><p class="admonition-title">Note</p><p>Unlike <code class="docutils literal
 notranslate"><span class="pre">iter()</span></code>, <code>aiter()</code> has no 2-argument variant.</p></div>
</section></div></div></div>
<div class="sphinxsidebar" role="navigation" aria-label="main navigation"><div class="sphinxsidebarwrapper">
<h3><a href="../contents.html">Table of Contents</a></h3><ul><li><a href="#">Built-in Functions</a></li></ul>
<h4>Previous topic</h4><p class="topless"><a href="intro.html">Introduction</a></p>
<div role="note" aria-label="source link"><h3>This Page</h3><ul class="this-page-menu">
<li><a href="../bugs.html">Report a Bug</a></li></ul></div></div></div></div>
<div class="footer">&#169; <a href="../copyright.html">Copyright</a> 2001-2023, Python Software Foundation.</div>
</body></html>"""
)

SITE = """<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Harbor Street: opening hours</title>
</head><body>
<header><a href="/">Harbor Street</a><ul><li><a href="/menu">Menu</a></li><li><a href="/shop">Shop</a></li></ul></header>
<nav aria-label="Breadcrumb"><ol><li><a href="/">Home</a></li><li><a href="/visit">Visit</a></li></ol></nav>
<div class="tagline">Baked since 1921.</div>
<main><article><h1>Opening hours</h1>
<p>We open at seven every
morning and close when the
bread runs out.</p>
<ul class="breadcrumbs"><li><a href="/a">Visit</a></li><li><a href="/b">Hours</a></li></ul>
<h2>Holidays</h2><dl><dt>Christmas Day</dt><dd>Closed.</dd><dt>Boxing Day</dt><dd>Open 9 to 13.</dd></dl>
</article></main>
<footer><p>&copy; Harbor Street Bakery. <a href="/privacy">Privacy</a></p></footer>
</body></html>"""


def _read(html: str, name: str = "page.html") -> ParsedDocument:
    return parse_document(html.encode(), name=name)


def _all_text(doc: ParsedDocument) -> str:
    return (
        "\n\n".join(s.text for s in doc.sections)
        + "\n"
        + "\n".join(h for s in doc.sections for h in s.headings)
    )


def test_navigation_headers_footers_and_sidebars_are_not_content() -> None:
    for html, chrome in (
        (DOCBOOK, ["Prev", "Up", "Home", "Next", "SQL Commands", "UPDATE"]),
        (SPHINX, ["Navigation", "index", "Previous topic", "Introduction", "Report a Bug", "Copyright"]),
        (SITE, ["Menu", "Shop", "Home", "Baked since", "Privacy", "Visit", "Hours"]),
    ):
        text = _all_text(_read(html))
        for word in chrome:
            assert word not in text.split() and word not in text, (word, text)
    sphinx = _read(SPHINX)
    assert sphinx.title == "Built-in Functions"  # the page's one h1, not "... — Python 3.11.2 documentation"
    assert sphinx.sections[0].headings == ["Built-in Functions"]  # the ¶ permalink is not part of it


def test_a_paragraph_is_one_line_whatever_the_source_wraps() -> None:
    text = _all_text(_read(DOCBOOK))
    assert (
        "Plain `VACUUM` (without `FULL`) simply reclaims space and makes it available for re-use. "
        "`VACUUM FULL` rewrites the entire contents of the table into a new disk file with no extra space, "
        "allowing unused space to be returned to the operating system." in text
    )
    assert (
        "we open at seven every morning and close when the bread runs out." in _all_text(_read(SITE)).lower()
    )


def test_table_rows_stay_under_their_column_headers_in_every_chunk() -> None:
    doc = _read(DOCBOOK)
    table = next(s.text for s in doc.sections if "bigint" in s.text)
    assert "| Name | Storage Size | Description | Range |" in table
    assert (
        "| `bigint` | 8 bytes | large-range integer | -9223372036854775808 to +9223372036854775807 |" in table
    )
    assert "| `a \\|\\| b` | variable |" in table  # a pipe inside a cell cannot end the cell
    chunks = chunk_document(doc, max_chars=150)  # small enough that the table spans several chunks
    rows = [c for c in chunks if "| `smallint`" in c.text or "| `bigint`" in c.text]
    assert len(rows) >= 2 and all(c.text.startswith("| Name | Storage Size |") for c in rows)


def test_no_markdown_escapes_in_the_text() -> None:
    for html in (DOCBOOK, SPHINX, SITE):
        text = _all_text(_read(html))
        assert "\\_" not in text and "\\*" not in text, text
    assert "`pg_checksums` and `pg_receivewal`" in _all_text(_read(DOCBOOK))
    assert "Functions that take *args and **kwargs accept any_number of arguments." in _all_text(
        _read(SPHINX)
    )


def test_code_blocks_stay_code_and_definitions_read_term_colon_definition() -> None:
    doc = _read(DOCBOOK)
    text = _all_text(doc)
    assert (
        "```\nVACUUM [ FULL ] [ FREEZE ] [ VERBOSE ] [ table_name ]\n\nwhere option can be one of:\n\n    FULL [ boolean ]\n```"
        in text
    )
    assert (
        "`FULL`: Selects “full” vacuum, which can reclaim more space, but takes much longer and "
        "exclusively locks the table." in text
    )
    assert "`VERBOSE`: Prints a detailed vacuum activity report for each table." in text
    assert "Note: Run `pg_checksums`" in text  # a note's title leads it instead of starting a section
    site = _all_text(_read(SITE))
    assert "Christmas Day: Closed." in site and "Boxing Day: Open 9 to 13." in site


def test_headings_are_the_section_path_and_a_long_api_entry_is_a_section_of_its_own() -> None:
    doc = _read(SPHINX)
    paths = [s.headings for s in doc.sections]
    assert ["Built-in Functions"] in paths
    assert ["Built-in Functions", "open(file, *args, **kwargs)"] in paths
    entry = next(s for s in doc.sections if s.headings[-1].startswith("open("))
    assert "```\nwith open('spam.txt') as f:\n    data = f.read()\n```" in entry.text
    short = next(s for s in doc.sections if "abs(x)" in s.text)  # short entries stay in their section
    assert short.headings == ["Built-in Functions"]
    # an API entry's term is code as the page shows it: its line opens with code, not in lower case
    assert "`abs(x)`: Return the absolute value of a number. The argument may be an integer" in short.text
    # what follows an entry is back under the page's heading, not the entry's
    after = next(s for s in doc.sections if "Functions that take" in s.text)
    assert after.headings == ["Built-in Functions"]
    assert DOCBOOK and [s.headings for s in _read(DOCBOOK).sections][:3] == [
        ["VACUUM"],
        ["Synopsis"],
        ["Description"],
    ]


def test_a_page_that_is_only_navigation_is_a_document_of_its_title_without_its_links() -> None:
    """A table of contents or an index is kept (listed, opened) but its links are not indexed:
    on the Python manual its lists outranked the pages they link to."""
    index = "<html><head><title>Index</title></head><body><ul><li><a href='a.html'>Alpha</a></li><li><a href='b.html'>Beta</a></li></ul></body></html>"
    doc = _read(index)
    assert doc.title == "Index" and _all_text(doc).strip() == "Index"
    contents = _manual_page("python3.11/html/contents.html")
    assert contents.title == "Python Documentation contents" and len(contents.sections) == 1
    assert "Maildir" not in _all_text(contents)


async def test_a_question_about_bigint_storage_finds_its_table_row(kb: KnowledgeBase, tmp_path: Path) -> None:
    page = tmp_path / "datatype-numeric.html"
    page.write_text(DOCBOOK)
    await kb.ingest_paths([page])
    for mode in ("hybrid", "text", "vector"):
        hits = await kb.search("how much storage does a bigint take", limit=1, mode=mode)  # type: ignore[arg-type]
        assert "| `bigint` | 8 bytes |" in hits[0].text, (mode, hits[0].text)
        assert "| Name | Storage Size |" in hits[0].text  # the row with its column headers


def test_a_table_is_embedded_and_indexed_a_row_at_a_time_under_its_headers() -> None:
    """The stored chunk keeps the Markdown table; what is embedded and full-text indexed writes each
    row with its column headers, so "bigint" and "Storage Size" meet in one line."""
    doc = _read(DOCBOOK)
    (table,) = [c for c in chunk_document(doc, max_chars=1200) if "| `bigint` | 8 bytes |" in c.text]
    indexed = search_text(doc.title, table.headings, table.text)
    assert "Name: `bigint`, Storage Size: 8 bytes" in indexed
    assert "| --- |" not in indexed and "| Name | Storage Size |" not in indexed


_MANUALS = Path("/usr/share/doc")


def _manual_page(relative: str) -> ParsedDocument:
    path = _MANUALS / relative
    if not path.exists():
        pytest.fail(
            f"{path} is missing: scripts/test.sh installs the Debian manuals (python3.11-doc, postgresql-doc-15)"
        )
    return parse_document(path.read_bytes(), name=path.name)


def test_the_real_postgresql_manual_reads_without_navigation_or_wraps() -> None:
    vacuum = _all_text(_manual_page("postgresql-doc-15/html/sql-vacuum.html"))
    assert "Prev" not in vacuum.split() and "Home" not in vacuum.split()
    assert (
        "Plain `VACUUM` (without `FULL`) simply reclaims space and makes it available for re-use." in vacuum
    )
    assert "`FULL`: Selects “full” vacuum, which can reclaim more space" in vacuum
    numeric = _all_text(_manual_page("postgresql-doc-15/html/datatype-numeric.html"))
    assert "| Name | Storage Size | Description | Range |" in numeric
    assert "| `bigint` | 8 bytes | large-range integer |" in numeric
    assert "\\_" not in vacuum + numeric


def test_the_real_python_manual_keeps_api_entries_and_drops_its_sidebar() -> None:
    doc = _manual_page("python3.11/html/library/functions.html")
    text = _all_text(doc)
    assert doc.title == "Built-in Functions"
    assert "Report a Bug" not in text and "Show Source" not in text and "Previous topic" not in text
    assert "`abs(x)`: Return the absolute value of a number." in text
    assert any(s.headings[-1].startswith("open(file, mode='r'") for s in doc.sections)
    assert "\\_" not in text and "\\*" not in text


def test_a_real_pages_one_line_introductions_join_the_passage_under_them_and_no_chunk_is_a_lone_fence() -> (
    None
):
    """threading.html's "Lock Objects" ends in one line a split left alone; contextlib.html's
    recipes end in code fences a split can leave alone: neither is a chunk by itself."""
    for relative in ("python3.11/html/library/threading.html", "python3.11/html/library/contextlib.html"):
        chunks = chunk_document(_manual_page(relative), max_chars=1200)
        assert all(re.search(r"\w", chunk.text) for chunk in chunks), relative
        short = [c.text for c in chunks if len(c.text) < MIN_SECTION_CHARS]
        assert len(short) <= len(chunks) // 20, (relative, short)
    threading = chunk_document(_manual_page("python3.11/html/library/threading.html"), max_chars=1200)
    (lock,) = [c for c in threading if "All methods are executed atomically." in c.text]
    assert len(lock.text) > MIN_SECTION_CHARS
    assert lock.headings[:2] == ["threading — Thread-based parallelism", "Lock Objects"]


def test_a_code_block_cut_between_chunks_is_closed_in_one_and_opened_again_in_the_next() -> None:
    """The logging cookbook's long examples span chunks: each chunk is whole Markdown (its fences
    pair up), so a card shows the code as code and an answer does not quote it as prose."""
    chunks = chunk_document(_manual_page("python3.11/html/howto/logging-cookbook.html"), max_chars=1200)
    cut = [
        (a.text, b.text)
        for a, b in itertools.pairwise(chunks)
        if a.section == b.section and a.text.endswith("```") and b.text.startswith("```\n")
    ]
    assert cut, "no code block continued into a next chunk (the page changed?)"
    for chunk in chunks:
        fences = [line for line in chunk.text.split("\n") if line.strip().startswith("```")]
        assert len(fences) % 2 == 0, chunk.text
