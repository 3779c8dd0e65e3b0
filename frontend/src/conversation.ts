// Renders the conversation: user and assistant messages, tool calls with their live progress,
// citation buttons, notices, and the versions of a conversation (edit a question, make an answer
// again, `‹ n/m ›` between the versions). Each message becomes one element that is rebuilt only
// when what it shows changes, so a streaming answer does not re-create the rest of the page on
// every token.
import type { Message, ToolCall } from "@ag-ui/client";

type ToolMessage = Extract<Message, { role: "tool" }>;
import { h } from "./dom";
import { codeBlock, inline, segments } from "./markdown";
import type { ChatSession } from "./session";
import type { Branch, Citation, ToolProgress, ToolResultShown, ToolStreamValue } from "./types";

/** `[3]`, `[1, 2]` or `[1; 4]` in answer text. */
const CITATION = /\[(\d+(?:\s*[,;]\s*\d+)*)\]/g;
const TRAILING_PUNCTUATION = /^[.,;:!?)»”’]+/;
const RESULT_PREVIEW_CHARS = 1500;
/** How many of a streaming tool's latest values the tool call shows. */
const STREAMED_SHOWN = 8;

interface Item {
  key: string;
  /** Everything the element depends on; the element is rebuilt when this changes. */
  sig: string;
  build: () => HTMLElement;
}

/** What the conversation's buttons do; the page wires them to the session. */
export interface ConversationActions {
  /** A citation button `[n]` was pressed. */
  cite: (index: string) => void;
  /** An edited question was sent. */
  edit: (messageId: string, text: string) => void;
  /** "Regenerate" under an answer (any message id of it). */
  regenerate: (answerId: string) => void;
  /** A version picker asks for this sibling. */
  switchTo: (messageId: string) => void;
}

/** The question being edited in place, with the text typed so far. */
interface Editing {
  id: string;
  draft: string;
}

export class ConversationView {
  private readonly rendered = new Map<string, { sig: string; element: HTMLElement }>();
  private editing: Editing | null = null;
  private session: ChatSession | null = null;
  /** A version picker's arrow was pressed: the picker to give the focus back to once it is shown. */
  private refocus: { id: string; which: "prev" | "next" } | null = null;

  constructor(
    private readonly root: HTMLElement,
    private readonly actions: ConversationActions,
  ) {
    root.addEventListener("click", (event) => {
      const button = (event.target as Element).closest<HTMLElement>("button.cite");
      if (button?.dataset.cite) actions.cite(button.dataset.cite);
    });
  }

  render(session: ChatSession): void {
    this.session = session;
    if (this.editing && !session.messages.some((m) => m.id === this.editing?.id)) this.editing = null;
    const stickToBottom = this.root.scrollHeight - this.root.scrollTop - this.root.clientHeight < 80;
    const items = buildItems(session, {
      editing: this.editing,
      startEdit: (id, text) => this.setEditing({ id, draft: text }),
      cancelEdit: () => this.setEditing(null),
      sendEdit: (id, text) => {
        this.editing = null;
        this.actions.edit(id, text);
      },
      regenerate: this.actions.regenerate,
      switchTo: (id, which) => {
        this.refocus = { id, which };
        this.actions.switchTo(id);
      },
    });
    const wanted = new Set(items.map((item) => item.key));
    for (const [key, entry] of this.rendered) {
      if (!wanted.has(key)) {
        entry.element.remove();
        this.rendered.delete(key);
      }
    }
    items.forEach((item, position) => {
      let entry = this.rendered.get(item.key);
      if (!entry || entry.sig !== item.sig) {
        const element = item.build();
        if (entry) entry.element.replaceWith(element);
        entry = { sig: item.sig, element };
        this.rendered.set(item.key, entry);
      }
      const current = this.root.children[position];
      if (current !== entry.element) this.root.insertBefore(entry.element, current ?? null);
    });
    this.root.setAttribute("aria-busy", String(session.busy));
    if (stickToBottom) this.root.scrollTop = this.root.scrollHeight;
    this.restorePickerFocus();
  }

  /**
   * A switch rebuilds the message its picker sits on, and the pressed arrow with it, so the focus
   * falls to the page's body. Once the version asked for shows with its picker enabled, the focus
   * goes to the same arrow there, or to the other one at the first or last version. Given up as
   * soon as the focus is somewhere else (the user moved on).
   */
  private restorePickerFocus(): void {
    if (!this.refocus) return;
    const focused = document.activeElement;
    if (focused && focused !== document.body && !this.root.contains(focused)) {
      this.refocus = null;
      return;
    }
    const { id, which } = this.refocus;
    const picker = this.root.querySelector(`.branch-picker[data-branch-of="${CSS.escape(id)}"]`);
    const arrows = [`.branch-${which}`, `.branch-${which === "prev" ? "next" : "prev"}`]
      .map((selector) => picker?.querySelector<HTMLButtonElement>(selector))
      .filter((arrow): arrow is HTMLButtonElement => !!arrow && !arrow.disabled);
    if (!arrows.length) return; // not shown yet, or still waiting for the switch
    arrows[0].focus();
    this.refocus = null;
  }

  /** Open the editor on a question shown, with `draft` in it (an edit the server did not keep). */
  reopenEdit(id: string, draft: string): void {
    if (this.session?.messages.some((m) => m.id === id)) this.setEditing({ id, draft });
  }

  /** Open or leave an editor. Leaving it (Escape, Cancel) gives the focus back to the question's
   * Edit button: the editor's removal would otherwise drop it on the page's body. */
  private setEditing(editing: Editing | null): void {
    const left = this.editing?.id;
    this.editing = editing;
    if (this.session) this.render(this.session);
    if (editing) this.root.querySelector<HTMLTextAreaElement>(".edit-form textarea")?.focus();
    else if (left !== undefined) this.editButton(left)?.focus();
  }

  private editButton(id: string): HTMLButtonElement | null {
    return this.root.querySelector<HTMLButtonElement>(
      `article[data-message-id="${CSS.escape(id)}"] button.edit-question`,
    );
  }
}

/** The conversation's own controls, as buildItems passes them to the items. */
interface Controls {
  editing: Editing | null;
  startEdit: (id: string, text: string) => void;
  cancelEdit: () => void;
  sendEdit: (id: string, text: string) => void;
  regenerate: (answerId: string) => void;
  /** `which`: the arrow pressed, to keep the focus on it. */
  switchTo: (messageId: string, which: "prev" | "next") => void;
}

/**
 * What goes under an answer: "Regenerate" and a picker for each of its messages that has other
 * versions (after a regenerate that is the answer's first message, often the one calling a tool).
 */
interface AnswerFooter {
  regenerate: boolean;
  pickers: [string, Branch][];
}

/**
 * The footer of each answer, by the id of the answer's last assistant message: an answer is what
 * follows a question up to the next one. The answer still streaming in gets none.
 */
function answerFooters(session: ChatSession): Map<string, AnswerFooter> {
  const footers = new Map<string, AnswerFooter>();
  let asked = false;
  let turn: Message[] = [];
  const close = (streaming: boolean) => {
    const last = turn.filter((m) => m.role === "assistant").at(-1);
    if (last && !streaming) {
      const pickers = turn.flatMap((m): [string, Branch][] =>
        session.branches[m.id] ? [[m.id, session.branches[m.id]]] : [],
      );
      footers.set(last.id, { regenerate: asked, pickers });
    }
    turn = [];
  };
  for (const message of session.messages) {
    if (message.role === "user") {
      close(false);
      asked = true;
    } else {
      turn.push(message);
    }
  }
  close(session.busy);
  return footers;
}

/**
 * A thinking model's reasoning (AG-UI reasoning messages), by the answer it is shown under: the
 * turn's last assistant message. Reasoning of a turn with no assistant message yet (the model is
 * still thinking) is shown on its own, where its first message is (`pending`, by that id).
 */
function turnReasoning(session: ChatSession): {
  byAnswer: Map<string, string[]>;
  pending: Map<string, string[]>;
} {
  const byAnswer = new Map<string, string[]>();
  const pending = new Map<string, string[]>();
  let thoughts: { id: string; text: string }[] = [];
  let answer: string | null = null;
  const close = () => {
    if (thoughts.length && answer)
      byAnswer.set(
        answer,
        thoughts.map((t) => t.text),
      );
    else if (thoughts.length)
      pending.set(
        thoughts[0].id,
        thoughts.map((t) => t.text),
      );
    thoughts = [];
    answer = null;
  };
  for (const message of session.messages) {
    if (message.role === "user") close();
    else if (message.role === "reasoning") {
      const text = typeof message.content === "string" ? message.content : "";
      if (text.trim()) thoughts.push({ id: message.id, text });
    } else if (message.role === "assistant") answer = message.id;
  }
  close();
  return { byAnswer, pending };
}

/** Reasoning, collapsed: "Thinking" opens it. */
function reasoningBlock(thoughts: string[]): HTMLElement {
  return h(
    "details",
    { class: "reasoning" },
    h("summary", {}, "Thinking"),
    ...thoughts.map((text) => h("p", { class: "reasoning-text" }, text)),
  );
}

function buildItems(session: ChatSession, controls: Controls): Item[] {
  const citations = session.citations;
  const results = new Map<string, ToolMessage>();
  for (const message of session.messages) {
    if (message.role === "tool") results.set(message.toolCallId, message);
  }
  const streamingId = session.busy ? session.messages.at(-1)?.id : undefined;
  const items: Item[] = [];
  const noticesAfter = (id: string | null) =>
    session.notices
      .filter((n) => n.afterMessageId === id)
      .forEach((notice) => items.push(noticeItem(notice)));

  if (session.messages.length === 0 && session.notices.length === 0) items.push(welcomeItem());
  noticesAfter(null);
  const ids = new Set(session.messages.map((m) => m.id));
  const footers = answerFooters(session);
  const reasoning = turnReasoning(session);
  // A turn of the assistant is often several messages (tool calls, then the answer): only the
  // first one carries the "Assistant" label.
  let inAssistantTurn = false;
  for (const message of session.messages) {
    if (message.role === "user") {
      items.push(userItem(session, message.id, textOf(message.content), controls));
      inAssistantTurn = false;
    } else if (message.role === "assistant") {
      const streaming = message.id === streamingId;
      const footer = footers.get(message.id) ?? null;
      const thoughts = reasoning.byAnswer.get(message.id) ?? [];
      items.push(
        assistantItem(
          session,
          message,
          citations,
          results,
          streaming,
          !inAssistantTurn,
          footer,
          controls,
          thoughts,
        ),
      );
      inAssistantTurn = true;
    } else if (message.role === "reasoning" && reasoning.pending.has(message.id)) {
      const thoughts = reasoning.pending.get(message.id) ?? [];
      const label = inAssistantTurn ? null : "Assistant";
      items.push({
        key: message.id,
        sig: JSON.stringify(["reasoning", thoughts, label]),
        build: () =>
          bubble("assistant", label, "message-tools message-thinking", message.id, [
            reasoningBlock(thoughts),
          ]),
      });
      inAssistantTurn = true;
    }
    noticesAfter(message.id);
  }
  // notices whose message is gone (the thread was re-synced) go last
  session.notices
    .filter((n) => n.afterMessageId !== null && !ids.has(n.afterMessageId))
    .forEach((notice) => items.push(noticeItem(notice)));
  return items;
}

/** A question: its text, "Edit" and its version picker; or, while edited, a form in its place. */
function userItem(session: ChatSession, id: string, text: string, controls: Controls): Item {
  const branch = session.branches[id];
  const editing = controls.editing?.id === id ? controls.editing : null;
  const sig = JSON.stringify([text, branch, session.canBranch, session.canSwitch, editing !== null]);
  if (editing) return { key: id, sig, build: () => editForm(session, id, editing, controls) };
  return {
    key: id,
    sig,
    build: () =>
      bubble("user", "You", "", id, renderText(text, {}), [
        h(
          "button",
          {
            type: "button",
            class: "message-action edit-question",
            "aria-label": "Edit this question",
            disabled: !session.canBranch,
            onclick: () => controls.startEdit(id, text),
          },
          "Edit",
        ),
        branch ? branchPicker(id, branch, "question", session.canSwitch, controls.switchTo) : null,
      ]),
  };
}

/** The question in a text box: Send asks it instead (a new version), Cancel or Escape leaves it. */
function editForm(session: ChatSession, id: string, editing: Editing, controls: Controls): HTMLElement {
  const box = h(
    "textarea",
    {
      id: `edit-${id}`,
      rows: 3,
      oninput: () => {
        editing.draft = box.value;
      },
      onkeydown: (event: Event) => {
        const key = event as KeyboardEvent;
        if (key.key === "Escape") controls.cancelEdit();
        if (key.key === "Enter" && !key.shiftKey && !key.isComposing) {
          event.preventDefault();
          form.requestSubmit();
        }
      },
    },
    editing.draft,
  );
  const form = h(
    "form",
    {
      class: "edit-form",
      onsubmit: (event: Event) => {
        event.preventDefault();
        const text = box.value.trim();
        if (text && session.canBranch) controls.sendEdit(id, text);
      },
    },
    h("label", { class: "visually-hidden", for: `edit-${id}` }, "Your edited question"),
    box,
    h(
      "div",
      { class: "edit-actions" },
      h("button", { type: "button", onclick: () => controls.cancelEdit() }, "Cancel"),
      h("button", { type: "submit", class: "primary", disabled: !session.canBranch }, "Send"),
    ),
  );
  return h(
    "article",
    { class: "message message-user message-editing", "data-message-id": id, "aria-label": "You" },
    h("div", { class: "message-role", "aria-hidden": "true" }, "You"),
    form,
  );
}

/** `‹ n/m ›`: the versions of a message; the arrows show the previous or next one. */
function branchPicker(
  id: string,
  branch: Branch,
  what: "question" | "answer",
  enabled: boolean,
  switchTo: (messageId: string, which: "prev" | "next") => void,
): HTMLElement {
  const shown = branch.index + 1;
  const count = branch.ids.length;
  const go = (index: number) => () => switchTo(branch.ids[index], index < branch.index ? "prev" : "next");
  return h(
    "div",
    {
      class: "branch-picker",
      role: "group",
      "data-branch-of": id,
      "aria-label": `Version ${shown} of ${count} of this ${what}`,
    },
    h(
      "button",
      {
        type: "button",
        class: "branch-prev",
        "aria-label": `Previous version of this ${what}`,
        disabled: !enabled || branch.index === 0,
        onclick: go(branch.index - 1),
      },
      "‹",
    ),
    h("span", { class: "branch-count", "aria-hidden": "true" }, `${shown}/${count}`),
    h(
      "button",
      {
        type: "button",
        class: "branch-next",
        "aria-label": `Next version of this ${what}`,
        disabled: !enabled || branch.index === count - 1,
        onclick: go(branch.index + 1),
      },
      "›",
    ),
  );
}

function assistantItem(
  session: ChatSession,
  message: Extract<Message, { role: "assistant" }>,
  citations: Record<string, Citation>,
  results: Map<string, ToolMessage>,
  streaming: boolean,
  labelled: boolean,
  footer: AnswerFooter | null,
  controls: Controls,
  thoughts: string[] = [],
): Item {
  const text = message.content ?? "";
  const calls = (message.toolCalls ?? []).map((call) => {
    const result = results.get(call.id);
    const edited = session.editedArgs.get(call.id);
    return {
      call,
      args: edited ? JSON.stringify(edited) : null,
      status: toolStatus(session, call.id, result),
      progress: session.progress.get(call.id),
      streamed: session.streamed.get(call.id) ?? [],
      shown: session.shownFor(call.id),
      result: result ? textOf(result.content) : null,
    };
  });
  // which of the cited numbers resolve: when a citation arrives in the state, the button appears;
  // an older answer's card the state no longer carries is read from the server
  const numbers = [...text.matchAll(CITATION)].flatMap((m) => splitNumbers(m[1]));
  if (!streaming) numbers.filter((n) => !(n in citations)).forEach((n) => session.requestCitation(Number(n)));
  const cited = numbers.filter((n) => n in citations);
  const actions = footer ? [footer, session.canBranch, session.canSwitch] : null;
  const sig = JSON.stringify([text, streaming, labelled, cited, calls, actions, thoughts]);
  return {
    key: message.id,
    sig,
    build: () => {
      const paragraphs = text ? renderText(text, citations) : [];
      if (streaming && (text || !calls.length)) {
        if (!paragraphs.length) paragraphs.push(h("p"));
        paragraphs[paragraphs.length - 1].append(caret());
      }
      const toolsOnly = !paragraphs.length;
      return bubble(
        "assistant",
        labelled ? "Assistant" : null,
        toolsOnly ? "message-tools" : "",
        message.id,
        [
          ...calls.map((c) =>
            toolCallBlock(session, c.call, c.args, c.status, c.progress, c.streamed, c.shown, c.result),
          ),
          ...paragraphs,
          thoughts.length ? reasoningBlock(thoughts) : null,
        ],
        footer ? answerActions(session, message.id, footer, controls) : null,
      );
    },
  };
}

/** Under an answer: its version pickers and "Regenerate". */
function answerActions(
  session: ChatSession,
  answerId: string,
  footer: AnswerFooter,
  controls: Controls,
): (HTMLElement | null)[] {
  return [
    ...footer.pickers.map(([id, branch]) =>
      branchPicker(id, branch, "answer", session.canSwitch, controls.switchTo),
    ),
    footer.regenerate
      ? h(
          "button",
          {
            type: "button",
            class: "message-action",
            "aria-label": "Regenerate this answer",
            disabled: !session.canBranch,
            onclick: () => controls.regenerate(answerId),
          },
          "Regenerate",
        )
      : null,
  ];
}

/** The blinking cursor at the end of an answer that is still streaming in. */
function caret(): HTMLElement {
  return h("span", { class: "caret", "aria-hidden": "true" });
}

function bubble(
  role: "user" | "assistant",
  label: string | null,
  extraClass: string,
  id: string,
  content: (Node | null)[],
  actions: (HTMLElement | null)[] | null = null,
): HTMLElement {
  return h(
    "article",
    {
      class: `message message-${role} ${extraClass}`.trim(),
      "aria-label": role === "user" ? "You" : "Assistant",
      "data-message-id": id,
    },
    label ? h("div", { class: "message-role", "aria-hidden": "true" }, label) : null,
    h("div", { class: "message-body" }, ...content),
    actions ? h("div", { class: "message-actions" }, ...actions) : null,
  );
}

type ToolStatus = "running" | "waiting" | "asking" | "done" | "edited" | "denied" | "failed" | "unfinished";

function toolStatus(session: ChatSession, toolCallId: string, result: ToolMessage | undefined): ToolStatus {
  const decision = session.decisions.get(toolCallId); // what this page answered to an approval request
  // a tool's question (live during the run, or an interrupt after it) waits for an answer, not an approval
  if (session.busy && session.liveQuestions.some((q) => q.toolCallId === toolCallId)) return "asking";
  const interrupt = session.interrupts.find((i) => i.toolCallId === toolCallId);
  if (interrupt)
    return (interrupt.metadata as { kind?: unknown } | undefined)?.kind === "question" ? "asking" : "waiting";
  if (decision === "denied" || (result && outcomeOf(result) === "denied")) return "denied";
  if (result?.error) return "failed";
  if (result) return decision === "edited" || session.editedArgs.has(toolCallId) ? "edited" : "done";
  return session.busy ? "running" : "unfinished";
}

/**
 * A tool result's outcome when it is not a success ("failed", "denied", ...): pydantic-ai carries it
 * in the message's `encryptedValue`, `{"pydantic_ai": {"outcome": ...}}` (AG-UI's ToolMessage has
 * no outcome field); undefined otherwise.
 */
function outcomeOf(result: ToolMessage): string | undefined {
  const carried = tryJson(result.encryptedValue ?? "");
  const outcome = (carried as { pydantic_ai?: { outcome?: unknown } } | null)?.pydantic_ai?.outcome;
  return typeof outcome === "string" ? outcome : undefined;
}

/** A tool call: its name, its arguments (`editedArgs`: those the user edited it to run with), its status. */
function toolCallBlock(
  session: ChatSession,
  call: ToolCall,
  editedArgs: string | null,
  status: ToolStatus,
  progress: ToolProgress | undefined,
  streamed: ToolStreamValue[],
  shown: ToolResultShown | undefined,
  result: string | null,
): HTMLElement {
  const labels: Record<ToolStatus, string> = {
    running: "running…",
    waiting: "waiting for your approval",
    asking: "waiting for your answer",
    done: "done",
    edited: "done, with your edited arguments",
    denied: "denied",
    failed: "did not complete",
    unfinished: "no result",
  };
  return h(
    "div",
    { class: `tool tool-${status}`, "data-tool-call-id": call.id },
    h(
      "div",
      { class: "tool-head" },
      h("span", { class: "tool-name" }, call.function.name),
      h(
        "span",
        {
          class: "tool-args",
          title: editedArgs ? `Proposed: ${summarizeArgs(call.function.arguments)}` : null,
        },
        summarizeArgs(editedArgs ?? call.function.arguments),
      ),
      h("span", { class: "tool-status" }, labels[status]),
    ),
    progress ? progressLine(progress, status === "running") : null,
    streamed.length ? streamedList(streamed) : null,
    shown ? shownResult(session, shown) : null,
    result !== null ? resultDetails(result) : null,
  );
}

/** What a streaming tool yielded so far (CUSTOM `ragstream.tool_stream`), newest last. */
function streamedList(streamed: ToolStreamValue[]): HTMLElement {
  const recent = streamed.slice(-STREAMED_SHOWN);
  return h(
    "ol",
    { class: "tool-stream", start: recent[0].index + 1, "aria-live": "polite" },
    recent.map((s) => h("li", {}, typeof s.value === "string" ? s.value : JSON.stringify(s.value))),
  );
}

/** A `ToolResult`'s title, metadata and attachments (CUSTOM `ragstream.tool_result`). */
function shownResult(session: ChatSession, shown: ToolResultShown): HTMLElement {
  const metadata = Object.entries(shown.metadata ?? {});
  return h(
    "div",
    { class: `tool-shown${shown.isError ? " tool-shown-error" : ""}` },
    shown.title ? h("p", { class: "tool-title" }, shown.title) : null,
    metadata.length
      ? h(
          "dl",
          { class: "tool-metadata" },
          metadata.flatMap(([k, v]) => [
            h("dt", {}, k),
            h("dd", {}, typeof v === "string" ? v : JSON.stringify(v)),
          ]),
        )
      : null,
    shown.wasTruncated
      ? h(
          "p",
          { class: "tool-truncated" },
          shown.originalBytes !== null && shown.originalBytes !== undefined
            ? `The model saw part of a ${byteSize(shown.originalBytes)} result.`
            : "The model saw part of the result.",
        )
      : null,
    ...(shown.attachments ?? []).map((a) =>
      a.omitted
        ? h("p", { class: "tool-attachment" }, `${a.name} (not kept: ${a.omitted})`)
        : h(
            "button",
            {
              type: "button",
              class: "tool-attachment",
              "data-attachment-ref": a.ref,
              onclick: () => void session.downloadAttachment(a),
            },
            `Download ${a.name} (${byteSize(a.size)})`,
          ),
    ),
  );
}

/**
 * A size as people read it: "1 byte", "512 bytes", "1.7 KB", "2.4 MB" (units of 1024, one decimal
 * at most). Every size the page shows goes through here.
 */
export function byteSize(bytes: number): string {
  if (!Number.isFinite(bytes) || bytes < 0) return "unknown size";
  if (bytes < 1024) return bytes === 1 ? "1 byte" : `${bytes} bytes`;
  const units = ["KB", "MB", "GB", "TB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit += 1;
  }
  return `${Number(value.toFixed(1))} ${units[unit]}`;
}

/** The tool's latest progress report (CUSTOM `ragstream.progress` event), with a bar while it runs. */
function progressLine(progress: ToolProgress, running: boolean): HTMLElement {
  const { done, total } = progress;
  const bar = running && done !== undefined && total !== undefined;
  return h(
    "p",
    { class: "tool-progress" },
    progress.message,
    bar ? h("progress", { max: total, value: done, "aria-hidden": "true" }) : null,
  );
}

/** The tool's result, folded away: search results as a list of sources, anything else as text. */
function resultDetails(result: string): HTMLElement {
  let body: Node;
  const parsed = tryJson(result) as
    { results?: { citation?: number; title?: string; location?: string }[] } | undefined;
  if (parsed && Array.isArray(parsed.results)) {
    body = parsed.results.length
      ? h(
          "ol",
          { class: "result-list" },
          parsed.results.map((r) =>
            h(
              "li",
              {},
              `[${r.citation ?? "?"}] ${r.title ?? "untitled"}`,
              r.location ? ` · ${r.location}` : "",
            ),
          ),
        )
      : h("p", {}, "No passages matched.");
  } else {
    const text = result.length > RESULT_PREVIEW_CHARS ? `${result.slice(0, RESULT_PREVIEW_CHARS)}…` : result;
    body = h("pre", { class: "result-text" }, text);
  }
  return h("details", { class: "tool-result" }, h("summary", {}, "Result"), body);
}

/** A tool call's arguments in one short line: a lone string argument quoted, else its JSON. */
function summarizeArgs(raw: string): string {
  const args = tryJson(raw);
  if (args && typeof args === "object" && !Array.isArray(args)) {
    const values = Object.values(args as Record<string, unknown>);
    if (values.length === 1 && typeof values[0] === "string") return `“${clip(values[0])}”`;
    return clip(JSON.stringify(args));
  }
  return clip(raw);
}

function clip(text: string, length = 120): string {
  return text.length > length ? `${text.slice(0, length - 1)}…` : text;
}

/**
 * Text to paragraphs and code blocks (`markdown.segments`: a fenced block stays one block, blank
 * lines and all), with each citation marker as a button and inline code, bold and emphasis shown
 * as such (`markdown.inline`). Text is only ever inserted as text nodes. A marker whose number is
 * not (yet) in the state's citations stays plain text.
 */
export function renderText(text: string, citations: Record<string, Citation>): HTMLElement[] {
  return segments(text).flatMap((segment) =>
    "code" in segment
      ? [codeBlock(segment.code)]
      : segment.prose
          .split(/\n{2,}/)
          .filter((block) => block.trim())
          .map((block) => paragraph(block, citations)),
  );
}

function paragraph(block: string, citations: Record<string, Citation>): HTMLElement {
  const out = h("p");
  block.split("\n").forEach((line, i) => {
    if (i > 0) out.append(h("br"));
    let last = 0;
    for (const match of line.matchAll(CITATION)) {
      const numbers = splitNumbers(match[1]);
      if (!numbers.every((n) => n in citations)) continue;
      out.append(...inline(line.slice(last, match.index)));
      last = match.index + match[0].length;
      // the markers and the punctuation right after them wrap as one ("[9]." never leaves "." alone)
      const after = TRAILING_PUNCTUATION.exec(line.slice(last))?.[0] ?? "";
      const group = h("span", { class: "cites" }, ...numbers.map((n) => citeButton(n, citations[n])), after);
      out.append(group);
      last += after.length;
    }
    out.append(...inline(line.slice(last)));
  });
  return out;
}

function citeButton(n: string, citation: Citation): HTMLElement {
  return h(
    "button",
    {
      type: "button",
      class: "cite",
      "data-cite": n,
      title: citation.title,
      "aria-label": `Source ${n}: ${citation.title}`,
    },
    `[${n}]`,
  );
}

function noticeItem(notice: ChatSession["notices"][number]): Item {
  return {
    key: `notice:${notice.id}`,
    sig: "",
    build: () =>
      h(
        "div",
        { class: `notice notice-${notice.kind}`, role: notice.kind === "error" ? "alert" : "status" },
        h("p", {}, notice.text),
        notice.detail
          ? h(
              "details",
              {},
              h("summary", {}, notice.detail.label),
              h("p", { class: "notice-detail" }, notice.detail.text),
            )
          : null,
      ),
  };
}

function welcomeItem(): Item {
  return {
    key: "welcome",
    sig: "",
    build: () =>
      h(
        "div",
        { class: "welcome" },
        h("h2", {}, "Ask your documents"),
        h(
          "p",
          {},
          "Answers cite their sources with numbers like [1]: press one to read the passage it comes from. ",
          "Use “Only search in” to limit the answers to some documents.",
        ),
      ),
  };
}

function splitNumbers(group: string): string[] {
  return group.split(/[,;]/).map((n) => n.trim());
}

function textOf(content: unknown): string {
  if (typeof content === "string") return content;
  if (Array.isArray(content)) {
    return content
      .map((part) => (part && typeof part === "object" && "text" in part ? String(part.text) : ""))
      .join("");
  }
  return "";
}

function tryJson(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}
