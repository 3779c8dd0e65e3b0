"""What a page shows: JavaScript values that should never be rendered, and citation source cards.

``rendered_junk(page)`` reads the page's visible text and the addresses and labels people meet
(``href``, ``title``, ``aria-label``, ``alt``) and returns every line holding ``undefined``,
``null``, ``NaN`` or ``[object Object]``: the trace of a field the page read and the server did not
send, or sent in another shape. ``check_source_card`` checks a card against the card the server
keeps (docs/protocol.md): where the passage sits, and a link to the document's original.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
from playwright.async_api import Locator, Page, expect

MEDIA_TYPES = {
    "pdf": "application/pdf",
    "md": "text/markdown",
    "html": "text/html",
    "txt": "text/plain",
    "csv": "text/csv",
    "pptx": "application/vnd.openxmlformats-officedocument.presentationml.presentation",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
}
JUNK = re.compile(r"\b(?:undefined|null|NaN)\b|\[object Object\]")

_SHOWN = """() => {
  const shown = [`document.title: ${document.title}`];
  shown.push(...document.body.innerText.split("\\n").map((line) => `text: ${line}`));
  for (const name of ["href", "title", "aria-label", "alt"]) {
    for (const element of document.querySelectorAll(`[${name}]`)) {
      shown.push(`<${element.localName} ${name}="${element.getAttribute(name)}">`);
    }
  }
  return shown;
}"""


async def rendered_junk(page: Page) -> list[str]:
    """Every shown line or attribute of ``page`` with a JavaScript value rendered as text."""
    shown: list[str] = await page.evaluate(_SHOWN)
    return [line for line in shown if JUNK.search(line)]


async def check_source_card(
    card: Locator, link: Locator, citation: dict[str, Any], files: httpx.AsyncClient, documents: str
) -> str:
    """``card`` shows where ``citation`` sits and ``link`` opens its original under ``documents`` (a
    PDF at its page), which ``files`` gets with its format's media type; returns the format."""
    kind = str(citation["uri"]).rsplit(".", 1)[-1]
    where = card.locator(".source-where")
    path = f"{documents}/{citation['document_id']}?format=file"
    if kind == "pdf":
        await expect(where).to_have_text(re.compile(rf"^page {citation['page']}( · .+)?$"))
        await expect(link).to_have_text(f"Open at page {citation['page']}")
        await expect(link).to_have_attribute("href", f"{path}#page={citation['page']}")
    else:  # its format's locator (a slide, a sheet's rows; none for text), then its headings
        assert citation["page"] is None and (citation["locator"] or citation["headings"]), citation
        shown = [citation["locator"], " › ".join(citation["headings"])]
        await expect(where).to_have_text(" · ".join(part for part in shown if part))
        await expect(link).to_have_text("Open")
        await expect(link).to_have_attribute("href", path)
    original = await files.get(path)
    assert original.status_code == 200, original.text
    assert original.headers["content-type"].startswith(MEDIA_TYPES[kind])
    return kind
