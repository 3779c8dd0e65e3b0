// The panels around the conversation: the chat list, the document filter and the source cards.
import { h, nodes } from "./dom";
import { passage } from "./markdown";
import type { Api } from "./api";
import type { Citation, DocumentInfo, DocumentPage, ThreadSummary } from "./types";

/** Why another chat does not open while an answer streams (one run at a time per page). */
export const WAIT_FOR_THE_ANSWER = "Stop the answer in progress, or wait for it, to open another chat";

/**
 * What a saved chat is called, in the list and in the header alike: its title (the first question
 * as shown), or "Untitled chat" when it has none (a chat saved without a question).
 */
export function chatTitle(title: string | null | undefined): string {
  return title || "Untitled chat";
}

/** The sidebar list of chats; each is a link to `#thread=<id>`. */
export class ThreadListView {
  private shownFor = "";

  constructor(
    private readonly root: HTMLElement,
    private readonly onDelete: (thread: ThreadSummary) => void,
    private readonly onMore: () => void,
    private readonly onLocked: () => void,
  ) {}

  /** `more`: older chats exist beyond those listed (a button fetches the next page). */
  render(threads: ThreadSummary[], currentId: string, locked: boolean, more = false): void {
    // rebuilt only when something it shows changes, so keyboard focus survives streaming
    const sig = JSON.stringify([threads, currentId, locked, more]);
    if (sig === this.shownFor) return;
    this.shownFor = sig;
    if (threads.length === 0) {
      this.root.replaceChildren(h("li", { class: "empty" }, "No saved chats yet."));
      return;
    }
    const older = more
      ? [
          h(
            "li",
            { class: "more" },
            h(
              "button",
              { type: "button", class: "threads-more", onclick: () => this.onMore() },
              "Show older chats",
            ),
          ),
        ]
      : [];
    this.root.replaceChildren(
      ...threads.map((thread) => {
        const title = chatTitle(thread.title);
        const current = thread.threadId === currentId;
        return h(
          "li",
          { class: current ? "current" : null },
          h(
            "a",
            {
              href: `#thread=${encodeURIComponent(thread.threadId)}`,
              "aria-current": current ? "page" : null,
              "aria-disabled": locked && !current ? "true" : null,
              title: locked && !current ? `${title} (${WAIT_FOR_THE_ANSWER})` : title,
              // handled here: the page keeps its address on the chat that streams, so the
              // address change of a click would be undone before anyone saw it
              onclick:
                locked && !current
                  ? (event: Event) => {
                      event.preventDefault();
                      this.onLocked();
                    }
                  : null,
            },
            title,
          ),
          this.deleteButton(thread, title, locked && current),
        );
      }),
      ...older,
    );
  }

  /** Deleting cannot be undone, so the first press only asks "Delete?" and the second deletes. */
  private deleteButton(thread: ThreadSummary, title: string, disabled: boolean): HTMLElement {
    const label = `Delete chat “${title}”`;
    const disarm = () => {
      delete button.dataset.armed;
      button.textContent = "×";
      button.setAttribute("aria-label", label);
    };
    const button = h(
      "button",
      {
        type: "button",
        class: "icon delete",
        "aria-label": label,
        title: "Delete chat",
        disabled,
        onblur: disarm,
        onclick: () => {
          if (button.dataset.armed) return this.onDelete(thread);
          button.dataset.armed = "true";
          button.textContent = "Delete?";
          button.setAttribute("aria-label", `Press again to delete “${title}”`);
        },
      },
      "×",
    );
    return button;
  }
}

/** How long typing pauses before the document search asks the server. */
const SEARCH_DELAY_MS = 200;

/**
 * The document filter: a search over the knowledge base's documents (as you type, a page at a
 * time: `GET /documents?q=`), a checkbox per document found, and free-text names (a name matches
 * every document whose title or uri contains it, ignoring case and spaces). The names chosen that
 * the list does not show are chips. `onChange` gets the new list.
 */
export class FilterView {
  private documents: DocumentInfo[] = [];
  private total = 0;
  private page = 1;
  private pages = 1;
  private query = "";
  private searched = false;
  private failed: string | null = null;
  private asked = 0;
  private timer = 0;
  private names: string[] = [];
  private applied: string[] = [];
  private shownFor = "";
  private readonly search: HTMLInputElement;

  constructor(
    private readonly root: HTMLElement,
    private readonly onChange: (names: string[]) => void,
    private readonly find: (query: string, page: number) => Promise<DocumentPage>,
  ) {
    // one search box for the panel's life: rebuilding the panel must not lose what is typed
    this.search = h("input", {
      type: "search",
      id: "filter-search",
      placeholder: "Find a document",
      autocomplete: "off",
      "aria-controls": "filter-documents",
      "aria-label": "Find a document by title or file name",
      "data-focus-key": "search",
      oninput: () => this.searchSoon(),
    });
  }

  /** List the documents again (after an upload), for the query in the box. */
  async refresh(): Promise<void> {
    await this.load(this.search.value.trim(), 1);
  }

  private searchSoon(): void {
    window.clearTimeout(this.timer);
    this.timer = window.setTimeout(() => void this.load(this.search.value.trim(), 1), SEARCH_DELAY_MS);
  }

  /** Page `page` of the documents matching `query`; a later search wins over an earlier one. */
  private async load(query: string, page: number): Promise<void> {
    const ask = ++this.asked;
    try {
      const found = await this.find(query, page);
      if (ask !== this.asked) return;
      this.documents = page === 1 ? found.documents : [...this.documents, ...found.documents];
      this.total = found.total;
      this.page = found.page;
      this.pages = found.pages;
      this.query = query;
      this.failed = null;
    } catch (error) {
      if (ask !== this.asked) return;
      this.failed = error instanceof Error ? error.message : String(error);
    }
    this.searched = true;
    this.shownFor = "";
    this.render(this.names, this.applied);
  }

  /** `applied` is the filter in the thread's state (what the last run used). */
  render(names: string[], applied: string[]): void {
    const sig = JSON.stringify([names, applied]);
    if (sig === this.shownFor) return;
    this.shownFor = sig;
    this.names = names;
    this.applied = applied;
    // The panel is rebuilt on every change: keep the keyboard focus where it was (or on the
    // name box when the focused control went away, e.g. a removed chip).
    const focused = this.root.contains(document.activeElement)
      ? ((document.activeElement as HTMLElement).dataset.focusKey ?? "name")
      : null;
    const titles = new Set(this.documents.map((d) => key(d.title)));
    this.root.replaceChildren(
      ...nodes(
        this.summary(names, applied),
        this.chips(names.filter((n) => !titles.has(key(n)))),
        h("div", { class: "doc-search" }, this.search),
        this.documentList(new Set(names.map(key))),
        this.more(),
        this.addForm(),
      ),
    );
    if (focused) this.root.querySelector<HTMLElement>(`[data-focus-key="${CSS.escape(focused)}"]`)?.focus();
  }

  private summary(names: string[], applied: string[]): HTMLElement {
    return h(
      "p",
      { class: "filter-summary" },
      names.length ? `Answers use only: ${names.join(", ")}. ` : "Answers use all documents. ",
      sameNames(names, applied) ? null : h("span", { class: "pending" }, "Applies from your next question. "),
      names.length
        ? h(
            "button",
            { type: "button", class: "link", "data-focus-key": "clear", onclick: () => this.onChange([]) },
            "Clear",
          )
        : null,
    );
  }

  /** Free text: a name matches every document whose title or uri contains it. */
  private addForm(): HTMLElement {
    const input = h("input", {
      type: "text",
      id: "filter-name",
      placeholder: "e.g. deployment",
      autocomplete: "off",
      "aria-describedby": "filter-help",
      "data-focus-key": "name",
    });
    const add = (event: Event) => {
      event.preventDefault();
      const value = input.value.trim();
      if (value) this.onChange([...this.names, value]);
    };
    return h(
      "form",
      { class: "filter-add", onsubmit: add },
      h("label", { for: "filter-name" }, "Add a document name"),
      h("div", { class: "row" }, input, h("button", { type: "submit", "data-focus-key": "add" }, "Add")),
      h(
        "p",
        { id: "filter-help", class: "muted" },
        "Matches every document whose title or address contains it.",
      ),
    );
  }

  /** The names that are not a listed document's title, each with a remove button. */
  private chips(free: string[]): HTMLElement | null {
    if (!free.length) return null;
    return h(
      "ul",
      { class: "chips", "aria-label": "Names in the filter" },
      free.map((name) =>
        h(
          "li",
          { class: "chip" },
          name,
          h(
            "button",
            {
              type: "button",
              class: "icon",
              "aria-label": `Remove “${name}” from the filter`,
              onclick: () => this.onChange(this.names.filter((n) => n !== name)),
            },
            "×",
          ),
        ),
      ),
    );
  }

  private documentList(chosen: Set<string>): HTMLElement {
    if (this.failed)
      return h("p", { class: "muted", role: "status" }, `Could not list the documents: ${this.failed}`);
    if (!this.searched) return h("p", { class: "muted", role: "status" }, "Listing the documents…");
    if (!this.documents.length) {
      return h(
        "p",
        { class: "muted", role: "status" },
        this.query ? `No document’s title or file name has “${this.query}”.` : "No documents listed.",
      );
    }
    const toggle = (title: string) => (event: Event) => {
      const on = (event.target as HTMLInputElement).checked;
      const rest = this.names.filter((n) => key(n) !== key(title));
      this.onChange(on ? [...rest, title] : rest);
    };
    return h(
      "ul",
      { class: "doc-list", id: "filter-documents", "aria-label": "Documents" },
      this.documents.map((doc) =>
        h(
          "li",
          {},
          h(
            "label",
            { title: doc.uri },
            h("input", {
              type: "checkbox",
              "data-focus-key": `doc:${doc.document_id}`,
              checked: chosen.has(key(doc.title)),
              onchange: toggle(doc.title),
            }),
            ` ${doc.title}`,
          ),
        ),
      ),
    );
  }

  /** How many of how many are listed, and the button that lists the next page. */
  private more(): HTMLElement | null {
    if (!this.searched || this.failed || this.total <= this.documents.length) return null;
    return h(
      "p",
      { class: "doc-more muted" },
      `${this.documents.length.toLocaleString()} of ${this.total.toLocaleString()} `,
      this.page < this.pages
        ? h(
            "button",
            {
              type: "button",
              class: "link",
              "data-focus-key": "more",
              onclick: () => void this.load(this.query, this.page + 1),
            },
            "Show more",
          )
        : null,
    );
  }
}

/** One card per citation in the thread's state; `show(n)` opens and highlights card n. */
export class SourcesView {
  private active: string | null = null;
  /** The chat the cards are of: an opened card is of that chat only (its `[n]` is another's elsewhere). */
  private chat: object | null = null;
  private shownFor = "";

  constructor(
    private readonly root: HTMLElement,
    private readonly count: HTMLElement,
    private readonly api: Api,
    private readonly onError: (message: string) => void,
  ) {}

  render(citations: Record<string, Citation>, chat: object): void {
    if (chat !== this.chat) {
      this.chat = chat;
      this.active = null;
      this.shownFor = "";
    }
    const entries = Object.entries(citations).sort(([a], [b]) => Number(a) - Number(b));
    const sig = JSON.stringify(entries.map(([n, c]) => [n, c.passage]));
    if (sig === this.shownFor) return;
    this.shownFor = sig;
    this.count.textContent = entries.length ? `(${entries.length})` : "";
    if (!entries.length) {
      this.root.replaceChildren(h("p", { class: "muted" }, "Sources appear here when an answer cites them."));
      return;
    }
    this.root.replaceChildren(...entries.map(([n, citation]) => this.card(n, citation)));
    if (this.active) this.highlight(this.active);
  }

  show(n: string): void {
    const card = this.highlight(n);
    if (!card) return;
    card.scrollIntoView({ block: "nearest", behavior: "smooth" });
    card.focus({ preventScroll: true });
  }

  private highlight(n: string): HTMLElement | null {
    this.active = n;
    let found: HTMLElement | null = null;
    for (const card of this.root.querySelectorAll<HTMLElement>(".source")) {
      const on = card.dataset.citation === n;
      card.classList.toggle("is-active", on);
      if (on) {
        card.setAttribute("aria-current", "true");
        found = card;
      } else {
        card.removeAttribute("aria-current");
      }
    }
    return found;
  }

  private card(n: string, citation: Citation): HTMLElement {
    const where = [citation.locator, citation.headings.join(" › ")].filter((part) => part !== "");
    const headingId = `source-${n}-title`;
    return h(
      "article",
      { class: "source", id: `source-${n}`, "data-citation": n, tabindex: -1, "aria-labelledby": headingId },
      h("h3", { id: headingId }, h("span", { class: "source-number" }, `[${n}]`), " ", citation.title),
      where.length ? h("p", { class: "source-where" }, where.join(" · ")) : null,
      h("p", { class: "source-uri" }, uriLink(citation.uri), " ", this.openLink(citation)),
      h("blockquote", { class: "source-passage" }, ...passage(citation.passage)),
      citation.page !== null ? this.pageImage(citation, citation.page) : null,
    );
  }

  /** The cited page as a picture with the passage's region marked; gone when it cannot be had
   * (a format without pages, the server without the ocr extra). */
  private pageImage(citation: Citation, page: number): HTMLElement {
    const image = h("img", {
      class: "source-page-image",
      alt: `Page ${page} of ${citation.title}, the cited passage marked`,
      loading: "lazy",
    });
    const figure = h("figure", { class: "source-page" }, image);
    image.addEventListener("error", () => figure.remove());
    const url = this.api.pageImageUrl(citation.document_id, page, citation.passage);
    if (!this.api.hasToken) {
      image.src = url;
    } else {
      this.api
        .objectUrl(url)
        .then((blob) => {
          image.addEventListener("load", () => URL.revokeObjectURL(blob), { once: true });
          image.src = blob;
        })
        .catch(() => figure.remove());
    }
    return figure;
  }

  /** A link to the cited document's original, at the cited page (`GET /documents/{id}`). */
  private openLink(citation: Citation): HTMLElement {
    const open = (event: Event) => {
      if (!this.api.hasToken) return; // the plain link works
      event.preventDefault();
      this.api
        .openDocument(citation.document_id, citation.page)
        .catch((error: unknown) => this.onError(`Could not open “${citation.title}”: ${String(error)}`));
    };
    return h(
      "a",
      {
        class: "source-open",
        href: this.api.documentFileUrl(citation.document_id, citation.page),
        target: "_blank",
        rel: "noopener",
        onclick: open,
        "aria-label": `Open ${citation.title}${citation.page !== null ? ` at page ${citation.page}` : ""}`,
      },
      citation.page !== null ? `Open at page ${citation.page}` : "Open",
    );
  }
}

/** http(s) addresses become links; others (file://, s3://) are shown as text. */
function uriLink(uri: string): Node {
  if (/^https?:\/\//i.test(uri))
    return h("a", { href: uri, target: "_blank", rel: "noopener noreferrer" }, uri);
  return document.createTextNode(uri);
}

function key(name: string): string {
  return name.toLowerCase().replace(/\s+/g, "");
}

function sameNames(a: string[], b: string[]): boolean {
  return a.length === b.length && a.every((n, i) => n === b[i]);
}
