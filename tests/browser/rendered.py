"""What a page shows that a person should never see: JavaScript values rendered as text.

``rendered_junk(page)`` reads the page's visible text and the addresses and labels people meet
(``href``, ``title``, ``aria-label``, ``alt``) and returns every line holding ``undefined``,
``null``, ``NaN`` or ``[object Object]``: the trace of a field the page read and the server did not
send, or sent in another shape.
"""

from __future__ import annotations

import re

from playwright.async_api import Page

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
