// The little Markdown that passages and answers carry, shown as formatting instead of raw marks:
// inline `code`, **bold** and *emphasis*, and fenced code blocks; in a passage also table rows and
// list items.
// Everything is built from text nodes and elements (never HTML parsed from the text), so nothing a
// document or a model says can inject markup.
import { h } from "./dom";

// A code span, or bold, or emphasis whose marks hug a word on both sides (so `*args and **kwargs`
// stays as written): the first of the three that opens, in order.
const INLINE =
  /(`+)([^`]|[^`].*?[^`])\1(?!`)|\*\*(?=\S)(.+?\S)\*\*|(?<![\w*])\*(?=[^\s*])([^*]*?[^\s*])\*(?![\w*])/g;
const FENCE = /^\s*(```|~~~)/;
const TABLE_ROW = /^\s*\|.*\|\s*$/;
const DELIMITER_ROW = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
const LIST_ITEM = /^(\s*)(?:[-*+]|\d+[.)])\s+(.*)$/;

/** `text` with its inline marks rendered: code, bold and emphasis. */
export function inline(text: string): (Node | string)[] {
  const out: (Node | string)[] = [];
  let last = 0;
  for (const match of text.matchAll(INLINE)) {
    const at = match.index ?? 0;
    if (at > last) out.push(text.slice(last, at));
    if (match[1] !== undefined) out.push(h("code", {}, match[2].trim() || match[2]));
    else if (match[3] !== undefined) out.push(h("strong", {}, ...inline(match[3])));
    else out.push(h("em", {}, ...inline(match[4])));
    last = at + match[0].length;
  }
  if (last < text.length) out.push(text.slice(last));
  return out;
}

/** A piece of Markdown: prose, or the lines of a fenced code block. */
export type Segment = { code: string } | { prose: string };

/**
 * `text` cut at its code fences: prose between them, each code block whole (blank lines inside it
 * included). A fence still open at the end, as in an answer streaming in, is code up to there.
 */
export function segments(text: string): Segment[] {
  const out: Segment[] = [];
  let prose: string[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    if (!FENCE.test(lines[i])) {
      prose.push(lines[i]);
      continue;
    }
    if (prose.join("").trim()) out.push({ prose: prose.join("\n") });
    prose = [];
    const code: string[] = [];
    for (i++; i < lines.length && !FENCE.test(lines[i]); i++) code.push(lines[i]);
    out.push({ code: code.join("\n") });
  }
  if (prose.join("").trim()) out.push({ prose: prose.join("\n") });
  return out;
}

/** A code block as it is shown. */
export function codeBlock(code: string): HTMLElement {
  return h("pre", {}, h("code", {}, code));
}

/** A passage's blocks: paragraphs, code blocks, tables (header row and body rows), list items. */
export function passage(text: string): HTMLElement[] {
  return segments(text).flatMap((segment) =>
    "code" in segment ? [codeBlock(segment.code)] : proseBlocks(segment.prose),
  );
}

function proseBlocks(text: string): HTMLElement[] {
  const blocks: HTMLElement[] = [];
  const lines = text.split("\n");
  let paragraph: string[] = [];
  const flush = () => {
    if (paragraph.join(" ").trim()) blocks.push(h("p", {}, ...inline(paragraph.join(" ").trim())));
    paragraph = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (TABLE_ROW.test(line)) {
      flush();
      const rows: string[] = [];
      for (; i < lines.length && TABLE_ROW.test(lines[i]); i++) rows.push(lines[i]);
      i--;
      blocks.push(table(rows));
      continue;
    }
    const item = LIST_ITEM.exec(line);
    if (item) {
      flush();
      blocks.push(h("p", { class: "passage-item" }, "• ", ...inline(item[2])));
      continue;
    }
    if (!line.trim()) flush();
    else paragraph.push(line.trim());
  }
  flush();
  return blocks;
}

function cells(row: string): string[] {
  return row
    .trim()
    .replace(/^\||\|$/g, "")
    .split(/(?<!\\)\|/)
    .map((cell) => cell.trim().replace(/\\\|/g, "|"));
}

/** Markdown table rows as a table; the first row heads it when a delimiter row follows it. */
function table(rows: string[]): HTMLElement {
  const headed = rows.length > 1 && DELIMITER_ROW.test(rows[1]);
  const body = rows.filter((row, n) => !(headed && n === 1) && !DELIMITER_ROW.test(row));
  const [head, ...rest] = headed ? body : [null, ...body];
  return h(
    "table",
    { class: "passage-table" },
    head
      ? h(
          "thead",
          {},
          h(
            "tr",
            {},
            cells(head).map((c) => h("th", {}, ...inline(c))),
          ),
        )
      : null,
    h(
      "tbody",
      {},
      rest.map((row) =>
        h(
          "tr",
          {},
          cells(row ?? "").map((c) => h("td", {}, ...inline(c))),
        ),
      ),
    ),
  );
}
