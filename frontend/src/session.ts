// One conversation thread: an @ag-ui/client HttpAgent plus what the page shows around its runs
// (the run phase, live tool progress, pending approvals, notices). The rendering code reads a
// ChatSession and listens to its changes; it never talks to the agent itself.
import {
  HttpAgent,
  type Interrupt,
  type Message,
  type ResumeEntry,
  type RunAgentInput,
  runHttpRequest,
  transformHttpEventStream,
} from "@ag-ui/client";
import { type Api, ApiError, errorCode, errorMessage, newId, runPath } from "./api";
import type {
  ApprovalPayload,
  Branch,
  Citation,
  LiveAnswer,
  LiveQuestion,
  RagState,
  ThreadView,
  ToolAttachmentRecord,
  ToolProgress,
  ToolResultShown,
  ToolStreamValue,
} from "./types";

export type RunPhase = "idle" | "running" | "stopping";

/** A line in the conversation that is not a message: a failed or stopped run, a hint. */
export interface Notice {
  id: string;
  /** Shown after this message (null: before the first one). */
  afterMessageId: string | null;
  kind: "error" | "info";
  text: string;
  /** Optional collapsed detail, e.g. the part of an answer that was streamed before a stop. */
  detail?: { label: string; text: string };
}

/** How a run ended, as the page needs to know it. */
export interface RunResult {
  outcome: "success" | "interrupt" | "cancelled" | "error";
  /** The question the server did not keep (stopped or failed run), to offer it again. */
  unsavedQuestion?: string;
  /** An edited question the server did not keep, to open again in its editor, as typed. */
  unsavedEdit?: { messageId: string; text: string };
}

/**
 * The page's agent: @ag-ui/client's HttpAgent, plus AG-UI's `connect` to a run already under way
 * (`connectAgent`): the run's events from its start, read from `GET /threads/{id}/runs/{run}/events`.
 */
class ChatAgent extends HttpAgent {
  protected override connect(input: RunAgentInput): ReturnType<HttpAgent["run"]> {
    const url = `${runPath(input.threadId, input.runId)}/events`;
    const init: RequestInit = {
      headers: { ...this.headers, Accept: "text/event-stream" },
      signal: this.abortController.signal,
    };
    return transformHttpEventStream(runHttpRequest(() => this.fetch(url, init)));
  }
}

export class ChatSession {
  readonly agent: HttpAgent;
  phase: RunPhase = "idle";
  /** The id of the run in progress: we choose it, so that Stop can name it. */
  runId: string | null = null;
  /** Approval requests the thread waits for (the last run ended with outcome `interrupt`). */
  interrupts: Interrupt[] = [];
  /**
   * Questions tools ask while the run goes on (CUSTOM `ragstream.question`, until their
   * `ragstream.question_end`): answered with `answerLive`, the tool continues where it asked.
   * The page says it answers live (`forwardedProps.ragstream.liveQuestions`); if it leaves the run
   * first, the server turns a waiting question into an interrupt, shown after a reload.
   */
  liveQuestions: LiveQuestion[] = [];
  /**
   * The latest CUSTOM `ragstream.progress` event of each tool call, by toolCallId. Progress is live only:
   * the server does not keep it, so a reloaded page shows tool calls without it.
   */
  readonly progress = new Map<string, ToolProgress>();
  /** What streaming tools yielded (CUSTOM `ragstream.tool_stream`), by toolCallId, in order; live only. */
  readonly streamed = new Map<string, ToolStreamValue[]>();
  /** What `ToolResult`s show (CUSTOM `ragstream.tool_result`): title, metadata, attachments; live only. */
  readonly shown = new Map<string, ToolResultShown>();
  readonly notices: Notice[] = [];
  /** How this page answered approval requests, by toolCallId (shown on the tool calls). */
  readonly decisions = new Map<string, "approved" | "edited" | "denied">();
  /**
   * The arguments calls ran with where the user edited them on approving, by toolCallId: this
   * page's own answers, and the thread view's `editedArgs` (so a reload still shows them).
   */
  editedArgs: Map<string, Record<string, unknown>>;
  /**
   * The user's document filter. It is the one client-owned field of the thread state: it lives
   * here, and `run()` copies it into the state the next run sends (see there).
   */
  filter: string[];
  /** Whether the server has saved this thread (see `ThreadView.saved`). */
  saved: boolean;
  /**
   * The run under way when the page opened the thread, followed to its end (see `follow`); it
   * resolves to the run's question when the run's turn was not saved (to offer it again).
   */
  following: Promise<string | undefined> | null = null;
  /**
   * The versions of the shown messages, by message id (the thread view's `branches`): read with
   * the thread, after every run and with every switch.
   */
  branches: Record<string, Branch>;
  /** A switch to another version is on its way to the server. */
  switching = false;
  title: string | null;
  /** Citation cards read from the server because the state no longer carries them, by number. */
  private readonly archived = new Map<string, Citation>();
  private readonly fetching = new Set<number>();

  private readonly listeners = new Set<() => void>();
  private lastRun: {
    outcome?: RunResult["outcome"];
    error?: string;
    code?: string;
  } = {};

  constructor(
    private readonly api: Api,
    readonly threadId: string,
    view: ThreadView | null,
    /** The key the server's state lives under (null: a flat state); see Api.stateKey. */
    readonly stateKey: string | null = null,
  ) {
    this.agent = new ChatAgent({
      url: "/agui",
      threadId,
      headers: api.headers,
      // A reloaded page continues from what the server saved: its messages and state.
      initialMessages: view?.messages ?? [],
      initialState: view?.state ?? {},
    });
    this.saved = view?.saved ?? false;
    this.branches = view?.branches ?? {};
    this.editedArgs = new Map(Object.entries(view?.editedArgs ?? {}));
    this.title = view?.title ?? null;
    this.filter = [...(this.ragState(view?.state ?? {}).document_filter ?? [])];
    this.setInterrupts(view?.interrupts ?? []);
    this.agent.subscribe({
      onMessagesChanged: () => this.changed(),
      onStateChanged: () => this.changed(),
      onCustomEvent: ({ event }) => {
        if (event.name === "ragstream.progress" && isProgress(event.value)) {
          this.progress.set(event.value.toolCallId, event.value);
          this.changed();
        } else if (event.name === "ragstream.tool_stream" && isForCall(event.value)) {
          const value = event.value as ToolStreamValue;
          this.streamed.set(value.toolCallId, [...(this.streamed.get(value.toolCallId) ?? []), value]);
          this.changed();
        } else if (event.name === "ragstream.tool_result" && isForCall(event.value)) {
          this.shown.set(event.value.toolCallId, event.value as ToolResultShown);
          this.changed();
        } else if (event.name === "ragstream.question" && isQuestion(event.value)) {
          this.liveQuestions = [...this.liveQuestions, event.value];
          this.changed();
        } else if (event.name === "ragstream.question_end" && isQuestion(event.value, false)) {
          const { questionId } = event.value;
          this.liveQuestions = this.liveQuestions.filter((q) => q.questionId !== questionId);
          this.changed();
        }
        // Other CUSTOM events (e.g. pydantic_ai_conversation_saved) are not for display.
      },
      onRunFinishedEvent: (params) => {
        this.lastRun.outcome = params.outcome;
        if (params.outcome === "interrupt") this.setInterrupts(params.interrupts);
      },
      onRunErrorEvent: ({ event }) => {
        this.lastRun = { outcome: "error", error: event.message, code: event.code };
      },
    });
  }

  /** The thread as the server has it, or a new, empty thread when it has none by that id. */
  static async open(
    api: Api,
    threadId: string,
    stateKey: string | null = null,
    known?: ThreadView | null,
  ): Promise<ChatSession> {
    const view = known !== undefined ? known : await api.getThread(threadId);
    const session = new ChatSession(api, threadId, view, stateKey);
    if (view?.activeRunId) session.following = session.follow(view.activeRunId);
    return session;
  }

  /** ragstream's part of the agent's state (under the state key, when the server uses one). */
  get state(): RagState {
    return this.ragState(this.agent.state);
  }

  private ragState(state: unknown): RagState {
    const whole = (state ?? {}) as Record<string, unknown>;
    return ((this.stateKey ? whole[this.stateKey] : whole) ?? {}) as RagState;
  }

  /** Every citation card the page knows: those the state carries and older ones read on demand. */
  get citations(): Record<string, Citation> {
    return { ...Object.fromEntries(this.archived), ...(this.state.citations ?? {}) };
  }

  /**
   * What a tool call's `ToolResult` showed: the live `ragstream.tool_result` event, or after a
   * reload its attachments as the thread's state keeps them (`tool_attachments`).
   */
  shownFor(toolCallId: string): ToolResultShown | undefined {
    const live = this.shown.get(toolCallId);
    if (live) return live;
    const kept = Object.values(this.state.tool_attachments ?? {}).filter(
      (a) => a.tool_call_id === toolCallId,
    );
    if (!kept.length) return undefined;
    return {
      toolCallId,
      tool: kept[0].tool,
      title: null,
      metadata: {},
      attachments: kept,
      isError: false,
      wasTruncated: false,
      originalBytes: null,
    };
  }

  /** Read the card of `[index]` from the server when the state no longer carries it. */
  requestCitation(index: number): void {
    if (!this.saved || this.fetching.has(index) || String(index) in this.citations) return;
    this.fetching.add(index);
    void this.api
      .citation(this.threadId, index)
      .then((card) => {
        if (card) {
          this.archived.set(String(index), card);
          this.changed();
        }
      })
      .catch(() => this.fetching.delete(index)); // try again on a later render
  }

  get messages(): Message[] {
    return this.agent.messages;
  }

  get busy(): boolean {
    return this.phase !== "idle";
  }

  /** Whether another version can be shown now (not while a run streams: the server says 409). */
  get canSwitch(): boolean {
    return !this.busy && !this.switching;
  }

  /** Whether a question can be edited or an answer made again now (not while approvals wait). */
  get canBranch(): boolean {
    return this.canSwitch && this.interrupts.length === 0;
  }

  /** Save a file a tool attached to its result (fetched with this page's token, then saved). */
  async downloadAttachment(record: ToolAttachmentRecord): Promise<void> {
    try {
      const blob = await this.api.attachment(this.threadId, record.ref);
      const url = URL.createObjectURL(blob);
      const link = document.createElement("a");
      link.href = url;
      link.download = record.name;
      link.click();
      setTimeout(() => URL.revokeObjectURL(url), 60_000);
    } catch (error) {
      this.notify("error", `Could not download ${record.name}: ${describe(error)}`);
    }
  }

  /** The latest progress report of a tool call that has no result yet. */
  get activeProgress(): ToolProgress | undefined {
    if (!this.busy) return undefined;
    const finished = new Set(this.messages.flatMap((m) => (m.role === "tool" ? [m.toolCallId] : [])));
    return [...this.progress.values()].filter((p) => !finished.has(p.toolCallId)).at(-1);
  }

  onChange(listener: () => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  setFilter(names: string[]): void {
    this.filter = [...new Set(names.map((n) => n.trim()).filter(Boolean))];
    this.changed();
  }

  /** Ask a question: a new user message, then a run. */
  ask(text: string): Promise<RunResult> {
    this.agent.addMessage({ id: newId(), role: "user", content: text });
    return this.run({}, text);
  }

  /**
   * Edit a question: send the conversation before it plus the new text, and run. The server keeps
   * the replaced question and everything after it as a branch beside the new one, and the model
   * sees only the conversation shown. The new question gets a new id, except when nothing comes
   * before it: a history with no answer and no id the thread knows would read as a new turn of the
   * branch shown, so the first question keeps its id (see docs/protocol.md, "Edit, regenerate, branches").
   */
  async edit(messageId: string, text: string): Promise<RunResult> {
    const at = this.messages.findIndex((m) => m.id === messageId);
    if (at < 0 || !this.canBranch) return { outcome: "error" };
    const before = this.messages.slice(0, at);
    const first = !before.some((m) => m.role === "user" || m.role === "assistant");
    this.agent.setMessages([...before, { id: first ? messageId : newId(), role: "user", content: text }]);
    this.forgetCards();
    const result = await this.run({}, text, false);
    const kept = result.outcome === "success" || result.outcome === "interrupt";
    return kept ? result : { ...result, unsavedEdit: { messageId, text } };
  }

  /**
   * Make an answer again: send the conversation up to and including its question, and run. The
   * new answer becomes a sibling of the old one, which stays a version to switch back to.
   */
  regenerate(answerId: string): Promise<RunResult> {
    const at = this.messages.findIndex((m) => m.id === answerId);
    let question = at;
    while (question >= 0 && this.messages[question].role !== "user") question -= 1;
    if (at < 0 || question < 0 || !this.canBranch) return Promise.resolve({ outcome: "error" });
    this.agent.setMessages(this.messages.slice(0, question + 1));
    this.forgetCards();
    return this.run({});
  }

  /**
   * Show another version: `messageId` is a sibling from `branches`. The server moves the thread to
   * that branch (as it was last shown) with its state; the page shows the view it answers.
   */
  async switchTo(messageId: string): Promise<void> {
    if (!this.canSwitch) return;
    this.switching = true;
    this.changed();
    try {
      this.show(await this.api.switchBranch(this.threadId, messageId));
      // a notice about a message of the branch left goes with it
      const shown = new Set(this.messages.map((m) => m.id));
      const kept = this.notices.filter((n) => n.afterMessageId === null || shown.has(n.afterMessageId));
      this.notices.splice(0, this.notices.length, ...kept);
    } catch (error) {
      this.notify("error", `Could not show that version: ${describe(error)}`);
    } finally {
      this.switching = false;
      this.changed();
    }
  }

  /**
   * Answer the pending approval requests, one payload per interrupt id, and let the run go on.
   * AG-UI 1.0 requires every open interrupt to be answered in the same `resume`.
   */
  async answer(payloads: Map<string, ApprovalPayload>): Promise<RunResult> {
    const resume: ResumeEntry[] = this.interrupts.map((interrupt) => {
      const payload = payloads.get(interrupt.id) ?? { approved: false, reason: "not answered" };
      if (interrupt.toolCallId) {
        const decision = !payload.approved ? "denied" : "editedArgs" in payload ? "edited" : "approved";
        this.decisions.set(interrupt.toolCallId, decision);
        if ("editedArgs" in payload) this.editedArgs.set(interrupt.toolCallId, payload.editedArgs);
      }
      return { interruptId: interrupt.id, status: "resolved", payload };
    });
    const calls = this.interrupts.flatMap((i) => (i.toolCallId ? [i.toolCallId] : []));
    const result = await this.run({ resume });
    // refused: what this page decided did not happen; the thread (resynced) says what did
    if (this.lastRun.code === ANSWERED_ELSEWHERE) {
      for (const call of calls) this.decisions.delete(call);
      this.changed();
    }
    return result;
  }

  /** Answer a tool's live question: the run in progress goes on from where the tool asked. */
  async answerLive(questionId: string, payload: ApprovalPayload): Promise<void> {
    if (this.runId === null) return;
    const answer: LiveAnswer =
      payload.approved && "answer" in payload
        ? { questionId, answer: payload.answer }
        : { questionId, declined: true, ...("reason" in payload ? { reason: payload.reason } : {}) };
    try {
      await this.api.answerQuestion(this.threadId, this.runId, answer);
    } catch (error) {
      // 409: the question timed out (or the run ended) meanwhile; the run tells what happened.
      this.liveQuestions = this.liveQuestions.filter((q) => q.questionId !== questionId);
      this.notify("error", `Your answer did not reach the tool: ${describe(error)}`);
    }
  }

  /** Stop the run in progress through the server's stop route (see Api.stopRun). */
  async stop(): Promise<void> {
    if (this.phase !== "running" || this.runId === null) return;
    this.phase = "stopping";
    this.changed();
    try {
      if (!(await this.api.stopRun(this.threadId, this.runId)))
        this.notify("info", "The answer had already finished when you pressed Stop; it is saved.");
    } catch (error) {
      // 404: the run ended on its own meanwhile; anything else is worth showing.
      if (!(error instanceof ApiError && error.status === 404))
        this.notify("error", `Could not stop: ${describe(error)}`);
    }
  }

  /**
   * Follow a run that was under way when the page opened the thread (a reload mid-answer, another
   * tab): its events stream in from the run's start, so the answer forms as it would have; when it
   * ends, the page shows the thread as the server saved it. The run's RUN_STARTED names the question
   * it answers, so the question shows above the answer as it forms. Stop works as for the page's own
   * runs; a turn not saved resolves to its question, to offer it again.
   */
  private async follow(runId: string): Promise<string | undefined> {
    this.runId = runId;
    this.phase = "running";
    this.lastRun = {};
    this.changed();
    const before = this.messages.length;
    try {
      this.agent.abortController = new AbortController();
      await this.agent.connectAgent({ runId });
    } catch (error) {
      this.lastRun = { outcome: "error", error: describe(error), code: errorCode(error) };
    }
    this.liveQuestions = [];
    const asked = this.messages
      .slice(before)
      .filter((m) => m.role === "user")
      .at(-1);
    const question =
      asked && typeof asked.content === "string" ? asked.content.trim() || undefined : undefined;
    const outcome = this.lastRun.outcome ?? "error";
    if (outcome === "success" || outcome === "interrupt") this.saved = true; // a first run saved it
    await this.resync();
    let unsaved: string | undefined;
    if ((outcome === "cancelled" || outcome === "error") && this.lastRun.code !== "abort") {
      const quoted = quote(question);
      this.notify(
        outcome === "cancelled" ? "info" : "error",
        outcome === "cancelled"
          ? `The run under way when this page opened was stopped; its turn${quoted} was not saved.`
          : `The run under way when this page opened ended without an answer. ${sentence(this.lastRun.error ?? "It failed.")} Its turn${quoted} was not saved.`,
      );
      unsaved = question;
    }
    this.phase = "idle";
    this.runId = null;
    this.changed();
    return unsaved;
  }

  /** Stop listening (page unload, switching threads); the server decides what happens to the run. */
  detach(): void {
    if (this.busy) this.agent.abortRun();
  }

  /**
   * One run of the agent with the messages as they are now. `question` names the turn in a notice
   * when it is not saved; `offerAgain` puts it back into the input box then (an edit reopens its editor instead).
   */
  private async run(
    params: { resume?: ResumeEntry[] },
    question?: string,
    offerAgain = true,
  ): Promise<RunResult> {
    // document_filter is client-owned, so the way to change it is to send it: the server takes it
    // from the state a run carries (every run then opens with a STATE_SNAPSHOT of the result).
    // The server-owned keys are sent back unchanged; the server would ignore edits anyway.
    const filtered = { ...this.state, document_filter: [...this.filter] };
    const whole = this.agent.state as Record<string, unknown>;
    this.agent.setState(this.stateKey ? { ...whole, [this.stateKey]: filtered } : filtered);
    const before = this.messages.length;
    this.runId = newId();
    this.phase = "running";
    this.lastRun = {};
    // Hide the approval cards while the run goes on. The agent keeps its own list: before sending,
    // it checks that a resume answers every open interrupt (and it clears the list itself).
    this.interrupts = [];
    this.changed();
    try {
      await this.agent.runAgent({ runId: this.runId, forwardedProps: LIVE_QUESTIONS, ...params });
    } catch (error) {
      // HTTP errors (409 busy, 401, 422 ...), a dropped connection or a protocol violation.
      this.lastRun = { outcome: "error", error: describe(error), code: errorCode(error) };
    }
    this.liveQuestions = [];
    const outcome = this.lastRun.outcome ?? "error";
    const result: RunResult = { outcome };
    if (outcome === "success" || outcome === "interrupt") {
      this.saved = true;
      await this.refreshSaved();
    } else {
      await this.discardTurn(before, outcome === "cancelled", question);
      if (question !== undefined && offerAgain) result.unsavedQuestion = question;
    }
    this.phase = "idle";
    this.runId = null;
    this.changed();
    return result;
  }

  /**
   * After a stopped or failed run. The server keeps the thread at its last saved state, so the page
   * shows that state too rather than the half-streamed turn: what you see is what the next run
   * continues from. The streamed text stays readable in the notice.
   */
  private async discardTurn(before: number, stopped: boolean, question?: string): Promise<void> {
    const streamed = this.messages
      .slice(before)
      .map((m) => (m.role === "assistant" && typeof m.content === "string" ? m.content : ""))
      .join("")
      .trim();
    await this.resync();
    if (!stopped && this.lastRun.code === "abort") return; // we closed the stream ourselves
    if (this.lastRun.code === ANSWERED_ELSEWHERE) {
      this.notify(
        "info",
        "That approval was already answered in another tab or window; this is how it went.",
      );
      return;
    }
    const asked = quote(question);
    this.notices.push({
      id: newId(),
      afterMessageId: this.messages.at(-1)?.id ?? null,
      kind: stopped ? "info" : "error",
      text: stopped
        ? `Stopped. This turn${asked} was not saved.`
        : `${sentence(this.lastRun.error ?? "the run ended without an answer")} This turn${asked} was not saved.`,
      detail: streamed
        ? { label: "What was streamed before it ended (not saved)", text: streamed }
        : undefined,
    });
  }

  /** Replace the local copy of the thread with the server's (none for a thread never saved). */
  private async resync(): Promise<void> {
    if (!this.saved) {
      this.show(null);
      return;
    }
    let view: ThreadView | null;
    try {
      view = await this.api.getThread(this.threadId);
    } catch (error) {
      this.notify("error", `Could not reload this chat: ${describe(error)}`);
      return;
    }
    this.show(view);
  }

  /** Show the thread as a view of it says: the branch's messages, its state, versions, approvals. */
  private show(view: ThreadView | null): void {
    this.saved = view?.saved ?? false;
    this.title = view?.title ?? null; // the shown path's first question: a switch may rename the chat
    this.agent.setMessages(view?.messages ?? []);
    this.agent.setState(view?.state ?? {});
    this.branches = view?.branches ?? {};
    this.editedArgs = new Map(Object.entries(view?.editedArgs ?? {}));
    this.setInterrupts(view?.interrupts ?? []);
    this.forgetCards();
  }

  /**
   * Drop the cards read on demand: citation numbers belong to a branch, so a card read for another
   * branch's `[n]` may not be this one's. The shown answers' markers read theirs again.
   */
  private forgetCards(): void {
    this.archived.clear();
    this.fetching.clear();
  }

  /**
   * After a run the server saved: its messages as saved, and the versions the run added (an edit, a
   * regenerate). The streamed messages carry no failure (AG-UI's TOOL_CALL_RESULT has no error
   * field), the saved ones do, so a tool call that failed shows so before a reload as after it.
   */
  private async refreshSaved(): Promise<void> {
    try {
      const view = await this.api.getThread(this.threadId);
      if (view) this.agent.setMessages(view.messages);
      this.branches = view?.branches ?? {};
    } catch (error) {
      this.notify("error", `Could not read the versions of this chat: ${describe(error)}`);
    }
  }

  private setInterrupts(interrupts: Interrupt[]): void {
    this.interrupts = interrupts;
    // A fresh agent (after a reload) does not know the thread's open interrupts; telling it
    // restores the client's own check that a resume answers all of them.
    this.agent.pendingInterrupts = interrupts;
  }

  notify(kind: Notice["kind"], text: string): void {
    this.notices.push({ id: newId(), afterMessageId: this.messages.at(-1)?.id ?? null, kind, text });
    this.changed();
  }

  changed(): void {
    for (const listener of this.listeners) listener();
  }
}

/** Tells the server this page answers tools' questions live (see `liveQuestions`). */
const LIVE_QUESTIONS = { ragstream: { liveQuestions: true } };
/** The server's 409 code for a resume of an interrupt another tab or window already answered. */
const ANSWERED_ELSEWHERE = "interrupt_not_pending";

function isQuestion(value: unknown, full = true): value is LiveQuestion {
  const v = value as LiveQuestion | null;
  return !!v && typeof v.questionId === "string" && (!full || typeof v.question === "string");
}

/** "thread is busy" -> "Thread is busy." */
/** A turn's question as a notice names it: ` (“...”)`, cut at 60 characters; "" for none. */
function quote(question: string | undefined): string {
  return question ? ` (“${question.length > 60 ? `${question.slice(0, 59)}…` : question}”)` : "";
}

function sentence(text: string): string {
  const trimmed = text.trim();
  const capitalized = trimmed.charAt(0).toUpperCase() + trimmed.slice(1);
  return /[.!?]$/.test(capitalized) ? capitalized : `${capitalized}.`;
}

function isForCall(value: unknown): value is { toolCallId: string } {
  return !!value && typeof (value as { toolCallId?: unknown }).toolCallId === "string";
}

function isProgress(value: unknown): value is ToolProgress {
  const v = value as ToolProgress | null;
  return !!v && typeof v.toolCallId === "string" && typeof v.message === "string";
}

/** A short message for an error from fetch, the agent or the server. */
export function describe(error: unknown): string {
  if (error instanceof ApiError) return error.message;
  const e = error as { status?: number; payload?: unknown; message?: string } | null;
  // @ag-ui/client rejects non-2xx answers with Error("HTTP <status>: <body>") plus status/payload.
  if (e && typeof e.status === "number") return errorMessage(e.status, e.payload);
  if (e?.message === "Failed to fetch") return "the server cannot be reached";
  return e?.message ?? String(error);
}
