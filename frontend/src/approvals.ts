// Approval prompts for AG-UI 1.0 interrupts: a run that wants to call a tool that needs the user's
// approval ends with outcome `interrupt`; the page shows one card per interrupt and resumes the
// thread with `resume: [{interruptId, status: "resolved", payload}]` once every card is answered.
// ragstream's payload is {approved: true} | {approved: true, editedArgs: {...}} | {approved: false, reason?}.
// A tool's question (`ask`, interrupt metadata `kind: "question"`) gets a text field instead and is
// answered with {approved: true, answer: "..."}; the tool then runs again and gets the answer.
// While a run goes on, a tool's question arrives live (CUSTOM `ragstream.question`): the same card
// shows during the run and posts the answer to the run (ChatSession.answerLive), and the tool goes
// on from where it asked.
import type { Interrupt } from "@ag-ui/client";
import { h } from "./dom";
import type { ChatSession } from "./session";
import type { ApprovalPayload, LiveQuestion } from "./types";

type Answered = (summary: string, payload: ApprovalPayload) => void;

export class ApprovalsView {
  private shownFor = "";
  private answers = new Map<string, ApprovalPayload>();

  /** `submit` resumes the run with one payload per interrupt. */
  constructor(
    private readonly root: HTMLElement,
    private readonly submit: (answers: Map<string, ApprovalPayload>) => void,
  ) {}

  render(session: ChatSession): void {
    // Cards hold what the user is typing, so they are only rebuilt when the questions change:
    // during a run its live questions, after it the interrupts it ended with.
    const live = session.busy;
    const ids = live ? session.liveQuestions.map((q) => q.questionId) : session.interrupts.map((i) => i.id);
    const key = ids.length ? `${live ? "live" : "interrupts"} ${ids.join(" ")}` : "";
    if (key === this.shownFor) return;
    this.shownFor = key;
    this.answers = new Map();
    const cards = live
      ? session.liveQuestions.map((q) => this.liveCard(session, q))
      : session.interrupts.map((i) => this.card(session, i));
    this.root.replaceChildren(...(key ? cards : []));
    this.root.hidden = !key;
  }

  private card(session: ChatSession, interrupt: Interrupt): HTMLElement {
    const metadata = (interrupt.metadata ?? {}) as { kind?: unknown; question?: unknown };
    if (metadata.kind === "question" && typeof metadata.question === "string") {
      const card = this.questionCard(`question-${interrupt.id}`, metadata.question, (card) =>
        this.answerer(session, interrupt, card),
      );
      card.dataset.interruptId = interrupt.id;
      return card;
    }
    const call = session.messages
      .flatMap((m) => (m.role === "assistant" ? (m.toolCalls ?? []) : []))
      .find((c) => c.id === interrupt.toolCallId);
    const args = prettyJson(call?.function.arguments ?? "{}");
    const headingId = `approval-${interrupt.id}`;
    const error = h("p", { class: "field-error", role: "alert", hidden: true });
    const editor = h("textarea", {
      class: "args-editor",
      rows: Math.min(12, args.split("\n").length + 1),
      spellcheck: "false",
      "aria-label": "Tool arguments (JSON)",
    });
    editor.value = args;
    const reason = h("input", {
      type: "text",
      class: "deny-reason",
      placeholder: "Reason (optional)",
      "aria-label": "Reason for denying (optional)",
    });

    const card = h("section", {
      class: "approval",
      "aria-labelledby": headingId,
      "data-interrupt-id": interrupt.id,
    });
    const answered = this.answerer(session, interrupt, card);
    const editButton = h("button", { type: "button", onclick: () => mode("edit") }, "Edit arguments");
    const denyButton = h("button", { type: "button", class: "danger", onclick: () => mode("deny") }, "Deny");
    // Cancel or Escape goes back to the choice with the focus on the button that opened the form
    // (the focused Cancel is hidden with its form, which would drop the focus on the page's body)
    const mode = (name: "choose" | "edit" | "deny", back?: HTMLElement) => {
      card.dataset.mode = name;
      error.hidden = true;
      if (name === "edit") editor.focus();
      if (name === "deny") reason.focus();
      back?.focus();
    };
    const escape = (back: HTMLElement) => (event: Event) => {
      if ((event as KeyboardEvent).key === "Escape") mode("choose", back);
    };
    editor.addEventListener("keydown", escape(editButton));
    reason.addEventListener("keydown", escape(denyButton));

    card.append(
      h("h3", { id: headingId }, "Approval needed"),
      h(
        "p",
        { class: "approval-message" },
        interrupt.message ?? `The assistant wants to run ${call?.function.name ?? "a tool"}.`,
      ),
      h("p", { class: "approval-tool" }, "Tool ", h("code", {}, call?.function.name ?? "unknown")),
      h("pre", { class: "approval-args only-choose" }, args),
      h(
        "div",
        { class: "approval-actions only-choose" },
        h(
          "button",
          { type: "button", class: "primary", onclick: () => answered("Approved.", { approved: true }) },
          "Approve",
        ),
        editButton,
        denyButton,
      ),
      h(
        "div",
        { class: "only-edit" },
        editor,
        error,
        h(
          "div",
          { class: "approval-actions" },
          h(
            "button",
            {
              type: "button",
              class: "primary",
              onclick: () => {
                const edited = parseArgs(editor.value);
                if (typeof edited === "string") {
                  error.textContent = edited;
                  error.hidden = false;
                  editor.setAttribute("aria-invalid", "true");
                  return;
                }
                answered("Approved with edited arguments.", { approved: true, editedArgs: edited });
              },
            },
            "Approve with these arguments",
          ),
          h("button", { type: "button", onclick: () => mode("choose", editButton) }, "Cancel"),
        ),
      ),
      h(
        "div",
        { class: "only-deny" },
        reason,
        h(
          "div",
          { class: "approval-actions" },
          h(
            "button",
            {
              type: "button",
              class: "danger",
              onclick: () => {
                const why = reason.value.trim();
                answered("Denied.", why ? { approved: false, reason: why } : { approved: false });
              },
            },
            "Deny",
          ),
          h("button", { type: "button", onclick: () => mode("choose", denyButton) }, "Cancel"),
        ),
      ),
    );
    mode("choose");
    return card;
  }

  /** Records one card's answer, shows its summary, and submits once every card is answered. */
  private answerer(session: ChatSession, interrupt: Interrupt, card: HTMLElement) {
    return (summary: string, payload: ApprovalPayload) => {
      this.answers.set(interrupt.id, payload);
      card.replaceChildren(h("p", { class: "approval-answered" }, summary));
      if (this.answers.size === session.interrupts.length) this.submit(this.answers);
    };
  }

  /** A question a tool asks while the run goes on: answered to the run, which continues. */
  private liveCard(session: ChatSession, question: LiveQuestion): HTMLElement {
    const card = this.questionCard(`live-${question.questionId}`, question.question, (card) => {
      return (summary, payload) => {
        card.replaceChildren(h("p", { class: "approval-answered" }, summary));
        void session.answerLive(question.questionId, payload);
      };
    });
    card.dataset.questionId = question.questionId;
    const wait = h(
      "p",
      { class: "question-wait" },
      `The tool waits for your answer (up to ${waitText(question.timeoutSeconds)}).`,
    );
    card.querySelector("h3")?.after(wait);
    return card;
  }

  /** A tool asks the user something (`ask`): a text answer, or declining to answer. */
  private questionCard(
    headingId: string,
    question: string,
    answering: (card: HTMLElement) => Answered,
  ): HTMLElement {
    const input = h("input", { type: "text", class: "question-answer", "aria-labelledby": headingId });
    const card = h("section", { class: "approval approval-question", "aria-labelledby": headingId });
    const answered = answering(card);
    const answer = () => {
      const text = input.value.trim();
      if (text) answered(`Answered: ${text}`, { approved: true, answer: text });
      else input.focus();
    };
    input.addEventListener("keydown", (event) => {
      // an Enter that confirms an input method's composition is not the answer's (as in the question box)
      if (event.key === "Enter" && !event.isComposing) answer();
    });
    card.append(
      h("h3", { id: headingId }, question),
      input,
      h(
        "div",
        { class: "approval-actions" },
        h("button", { type: "button", class: "primary", onclick: answer }, "Answer"),
        h(
          "button",
          {
            type: "button",
            onclick: () => answered("Declined.", { approved: false, reason: "The user declined to answer." }),
          },
          "Decline",
        ),
      ),
    );
    return card;
  }
}

/** "45 s", "2 min". */
function waitText(seconds: number): string {
  return seconds < 90 ? `${Math.round(seconds)} s` : `${Math.round(seconds / 60)} min`;
}

function prettyJson(raw: string): string {
  try {
    return JSON.stringify(JSON.parse(raw), null, 2);
  } catch {
    return raw;
  }
}

/** The edited arguments as an object, or an error message for the user. */
function parseArgs(text: string): Record<string, unknown> | string {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    return `That is not valid JSON: ${(error as Error).message}`;
  }
  if (!value || typeof value !== "object" || Array.isArray(value))
    return 'The arguments must be a JSON object, like {"name": "value"}.';
  return value as Record<string, unknown>;
}
