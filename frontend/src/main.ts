// The page: wires the chat session (session.ts) to the views and the browser (URL, forms, keys).
//
// The current thread's id lives in the URL as `#thread=<id>`, so a reload reopens it from
// `GET /threads/{id}`. A new chat gets its id in the URL when its first run starts (a reload then
// follows that run) and keeps it once the server has saved the thread (`urlThreadId`).
import { Api, newId, takeToken } from "./api";
import { ApprovalsView } from "./approvals";
import { ConversationView } from "./conversation";
import { byId } from "./dom";
import { FilterView, SourcesView, ThreadListView, WAIT_FOR_THE_ANSWER, chatTitle } from "./panels";
import { ChatSession, type RunResult, describe } from "./session";
import "./styles.css";
import { UploadsView } from "./uploads";
import type { ThreadSummary, ThreadView } from "./types";

const api = new Api(takeToken());
// The server's state key (RAGSTREAM_STATE_KEY), read once; a failure leaves the state flat.
const stateKey = api.stateKey().catch(() => null);

const ui = {
  title: byId("chat-title"),
  status: byId("run-status"),
  banner: byId("banner"),
  bannerText: byId("banner-text"),
  composer: byId<HTMLFormElement>("composer"),
  question: byId<HTMLTextAreaElement>("question"),
  send: byId<HTMLButtonElement>("send"),
  stop: byId<HTMLButtonElement>("stop"),
  hint: byId("composer-hint"),
  newChat: byId<HTMLButtonElement>("new-chat"),
};

const sources = new SourcesView(byId("sources"), byId("sources-count"), api, (message) =>
  showBanner(message),
);
const conversation = new ConversationView(byId("log"), {
  cite: (n) => sources.show(n),
  edit: (id, text) =>
    void session.edit(id, text).then((result) => {
      if (result.unsavedEdit) conversation.reopenEdit(result.unsavedEdit.messageId, result.unsavedEdit.text);
      afterRun(result);
    }),
  regenerate: (id) => void session.regenerate(id).then(afterRun),
  switchTo: (id) =>
    void session.switchTo(id).then(() => {
      tellTabs({ changed: session.threadId });
      return refreshThreads(); // the title may change with it
    }),
});
const approvals = new ApprovalsView(
  byId("approvals"),
  (answers) => void session.answer(answers).then(afterRun),
);
const filter = new FilterView(
  byId("filter"),
  (names) => session.setFilter(names),
  (query, page) => api.listDocuments(query, page),
);
// After an upload's job finishes, the filter lists the new documents.
new UploadsView(byId("uploads"), api, () => void refreshDocuments());
const SWITCH_WHILE_BUSY = "Stop the answer in progress before switching chats.";
const threadList = new ThreadListView(
  byId("threads"),
  (thread) => void deleteThread(thread),
  () => void showOlderThreads(),
  () => showBanner(SWITCH_WHILE_BUSY),
);

let session: ChatSession;
let stopListening = () => {};
let threads: ThreadSummary[] = [];
/** Where the listed chats end, when older ones exist (`GET /threads`' `next`). */
let olderThreads: string | null = null;
const THREAD_PAGE = 100;
let opening = 0;

// ---- rendering -------------------------------------------------------------------------------

let frame = 0;
/** Coalesce the many changes of a streaming run into one render per animation frame. */
function scheduleRender(): void {
  if (!frame) frame = requestAnimationFrame(render);
}

function render(): void {
  frame = 0;
  if (threadIdFromUrl() !== urlThreadId()) setUrlThread(urlThreadId());
  conversation.render(session);
  approvals.render(session);
  sources.render(session.citations, session);
  filter.render(session.filter, session.state.document_filter ?? []);
  threadList.render(threads, session.threadId, session.busy, olderThreads !== null);

  const waiting = session.interrupts.length > 0;
  ui.send.disabled = session.busy || session.switching || waiting;
  ui.stop.hidden = !session.busy;
  ui.stop.disabled = session.phase === "stopping";
  ui.stop.textContent = session.phase === "stopping" ? "Stopping…" : "Stop";
  ui.newChat.disabled = session.busy;
  ui.newChat.title = session.busy ? WAIT_FOR_THE_ANSWER : "";
  ui.hint.textContent = waiting
    ? "Answer the approval request above to continue."
    : session.liveQuestions.length
      ? "A tool is waiting for your answer above."
      : "";
  ui.status.textContent = statusText();

  // the listing is read again after every run (an edit of the first question renames the chat)
  // a saved chat has the name the list gives it; one not saved yet is a new chat
  const listed = threads.find((t) => t.threadId === session.threadId);
  const title = listed || session.saved ? chatTitle(listed?.title ?? session.title) : "New chat";
  ui.title.textContent = title;
  document.title = `${title} · ragstream`;
}

function statusText(): string {
  if (session.phase === "stopping") return "Stopping…";
  if (session.phase !== "running") return "";
  const last = session.messages.at(-1);
  if (last?.role === "assistant" && last.content) return "Answering…";
  return session.activeProgress?.message ?? "Thinking…";
}

function showBanner(message: string): void {
  ui.bannerText.textContent = message;
  ui.banner.hidden = false;
}

// ---- threads ----------------------------------------------------------------------------------

function threadIdFromUrl(): string | null {
  const match = /^#thread=(.+)$/.exec(window.location.hash);
  return match ? decodeURIComponent(match[1]) : null;
}

/** The thread the URL names: the session's once it is saved or while its first run goes on. */
function urlThreadId(): string | null {
  return session.saved || session.busy ? session.threadId : null;
}

function setUrlThread(threadId: string | null): void {
  const url = new URL(window.location.href);
  url.hash = threadId ? `thread=${encodeURIComponent(threadId)}` : "";
  history.replaceState(history.state, "", url);
}

/** Show `threadId` (a new chat for null); `view` when the caller has just read it (null: gone). */
async function openThread(threadId: string | null, view?: ThreadView | null): Promise<void> {
  const ticket = ++opening;
  const key = await stateKey;
  let next: ChatSession;
  try {
    next = threadId
      ? await ChatSession.open(api, threadId, key, view)
      : new ChatSession(api, newId(), null, key);
  } catch (error) {
    showBanner(`Could not open the chat: ${describe(error)}`);
    next = new ChatSession(api, newId(), null, key);
  }
  if (ticket !== opening) {
    next.detach(); // another thread was opened meanwhile
    return;
  }
  if (threadId && !next.saved && !next.busy) {
    // a new chat under a new id: a deleted chat is never made again under its old one (see below)
    next = new ChatSession(api, newId(), null, key);
    next.notify("info", "That chat does not exist (any more); this is a new one.");
  }
  stopListening();
  session?.detach();
  session = next;
  stopListening = session.onChange(scheduleRender);
  render();
  // a run under way when the thread opened may save it (a new chat's first answer): list it then;
  // a turn it did not save (stopped, failed) is offered again, as for the page's own runs
  void next.following?.then((unsaved) => {
    if (unsaved && session === next && !ui.question.value.trim()) ui.question.value = unsaved;
    return refreshThreads();
  });
}

/** List the chats again: as many as are shown (at least a page), so older ones stay listed. */
async function refreshThreads(): Promise<void> {
  try {
    const page = await api.listThreads(Math.min(1000, Math.max(THREAD_PAGE, threads.length)));
    threads = page.threads;
    olderThreads = page.next;
  } catch (error) {
    showBanner(`Could not list the chats: ${describe(error)}`);
  }
  scheduleRender();
}

async function showOlderThreads(): Promise<void> {
  if (olderThreads === null) return;
  try {
    const page = await api.listThreads(THREAD_PAGE, olderThreads);
    const listed = new Set(threads.map((t) => t.threadId));
    threads = [...threads, ...page.threads.filter((t) => !listed.has(t.threadId))];
    olderThreads = page.next;
  } catch (error) {
    showBanner(`Could not list older chats: ${describe(error)}`);
  }
  scheduleRender();
}

async function deleteThread(thread: ThreadSummary): Promise<void> {
  try {
    await api.deleteThread(thread.threadId);
  } catch (error) {
    showBanner(`Could not delete “${thread.title ?? "the chat"}”: ${describe(error)}`);
    return;
  }
  tellTabs({ deleted: thread.threadId });
  if (thread.threadId === session.threadId) {
    setUrlThread(null);
    await openThread(null);
  }
  await refreshThreads();
  // the pressed button went with its chat: the keyboard carries on from the question box
  if (document.activeElement === null || document.activeElement === document.body) ui.question.focus();
}

async function refreshDocuments(): Promise<void> {
  await filter.refresh(); // a failure is shown in the panel itself
  scheduleRender();
}

function afterRun(result: RunResult): void {
  // Offer a question the server did not keep (stopped or failed run) again.
  if (result.unsavedQuestion && !ui.question.value.trim()) ui.question.value = result.unsavedQuestion;
  // The Stop button and answered approval cards go away with the run: keep the keyboard focus.
  const focused = document.activeElement;
  if (!focused || focused === document.body || focused === ui.stop) ui.question.focus();
  if (session.saved) tellTabs({ changed: session.threadId });
  void refreshThreads();
}

// ---- other tabs ---------------------------------------------------------------------------------

/**
 * What a tab tells the page's other tabs (a BroadcastChannel: same origin, same browser): it deleted
 * a chat, or a chat changed (a turn saved, another version shown).
 */
type TabNews = { deleted: string } | { changed: string };

const tabs = "BroadcastChannel" in window ? new BroadcastChannel("ragstream.chats") : null;

function tellTabs(news: TabNews): void {
  tabs?.postMessage(news);
}

/**
 * A chat deleted elsewhere is left for a new one: its next question would otherwise create it again
 * under the old id, without its citations. A chat that changed elsewhere is read again, so the next
 * question continues what the user last saw there (not a stale copy that would branch it). Neither
 * while this tab runs or switches: its own run ends with what the server keeps.
 */
async function followElsewhere(
  threadId: string,
  deleted: boolean,
  where: string,
  view?: ThreadView,
): Promise<void> {
  if (threadId !== session.threadId || !session.saved || !session.canSwitch) return;
  if (!deleted) {
    await openThread(threadId, view);
    return;
  }
  setUrlThread(null);
  await openThread(null);
  session.notify("info", `This chat was deleted ${where}; this is a new one.`);
}

tabs?.addEventListener("message", (event: MessageEvent<TabNews>) => {
  const news = event.data;
  if ("deleted" in news) void followElsewhere(news.deleted, true, "in another tab");
  else void followElsewhere(news.changed, false, "in another tab");
  void refreshThreads();
});

// Shown again (another device may have changed things meanwhile): is the chat still there, as shown?
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState !== "visible") return;
  void refreshThreads();
  if (!session.saved || !session.canSwitch) return;
  const threadId = session.threadId;
  void api.getThread(threadId).then(
    (view) => {
      if (view === null) return followElsewhere(threadId, true, "elsewhere");
      const changed = view.messages.at(-1)?.id !== session.messages.at(-1)?.id;
      return changed ? followElsewhere(threadId, false, "elsewhere", view) : undefined;
    },
    () => undefined, // offline for a moment: the next question tells
  );
});

// ---- events -------------------------------------------------------------------------------------

ui.composer.addEventListener("submit", (event) => {
  event.preventDefault();
  const text = ui.question.value.trim();
  if (!text || !session.canBranch) return;
  ui.question.value = "";
  void session.ask(text).then(afterRun);
});

ui.question.addEventListener("keydown", (event) => {
  // Enter sends, Shift+Enter starts a new line (and IME composition is left alone).
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    ui.composer.requestSubmit();
  }
});

ui.stop.addEventListener("click", () => void session.stop());

ui.newChat.addEventListener("click", () => {
  if (session.busy) return;
  setUrlThread(null);
  void openThread(null).then(() => ui.question.focus());
});

byId("banner-close").addEventListener("click", () => {
  ui.banner.hidden = true;
});

window.addEventListener("hashchange", () => {
  const threadId = threadIdFromUrl();
  if (threadId === urlThreadId()) return;
  if (session.busy) {
    // One run at a time per page: switching away would leave this one without a listener.
    setUrlThread(urlThreadId());
    showBanner(SWITCH_WHILE_BUSY);
    return;
  }
  void openThread(threadId);
});

// Closing the tab closes the stream; the server then cancels the run (its disconnect policy).
window.addEventListener("pagehide", () => session?.detach());

// ---- start ----------------------------------------------------------------------------------------

void (async () => {
  await openThread(threadIdFromUrl());
  ui.question.focus();
  await refreshThreads();
  await refreshDocuments();
})();
