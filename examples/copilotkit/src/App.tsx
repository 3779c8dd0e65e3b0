// The page: CopilotKit's chat (v2 `CopilotChat`) talking to ragstream through the example's
// runtime, beside the document filter and the source cards, both bound to the agent's shared state.
import {
  CopilotChat,
  CopilotChatView,
  CopilotKitProvider,
  randomUUID,
  useAgent,
  useCopilotKit,
  useRenderTool,
  type CopilotChatViewProps,
  type Message,
} from "@copilotkit/react-core/v2";
import { createContext, useCallback, useContext, useEffect, useMemo, useRef, useState } from "react";

import { CitationsProvider, Sources } from "./citations";
import { DocumentFilter } from "./filter";
import { useRagstreamInterrupts } from "./interrupts";
import { PROGRESS_EVENT, THREAD_UNAVAILABLE, agentState, ragState, withDocumentFilter, type AppConfig, type Progress, type ThreadView } from "./ragstream";
import { ReasoningMessage } from "./reasoning";
import { ProgressProvider, ToolCall, ToolOutcomesProvider, WaitingProvider, toolOutcomes } from "./tools";
import {
  AssistantMessage,
  UserMessage,
  VersionsContext,
  answerTools,
  editedConversation,
  regeneratedConversation,
  type Branch,
  type VersionsValue,
} from "./versions";

const AGENT_ID = "default";

/**
 * Set while an edit or a regenerate runs: that run sends the whole conversation shown, which is how
 * ragstream knows where the new version branches off (the one page runs one run at a time).
 */
let wholeConversation = false;

/**
 * Send only the new turn: ragstream keeps the conversation, CopilotKit would resend all of it. An
 * edit or a regenerate sends it all (see `wholeConversation`).
 */
function newTurnOnly(messages: Message[]): Message[] {
  if (wholeConversation) return messages;
  let start = messages.length;
  while (start > 0 && messages[start - 1].role === "user") start -= 1;
  return messages.slice(start);
}

/** The thread in `?thread=...`; a new one goes into the URL at once, so a reload continues it. */
function threadFromUrl(): string {
  const current = new URLSearchParams(window.location.search).get("thread");
  if (current) return current;
  const fresh = randomUUID();
  window.history.replaceState(null, "", `?thread=${encodeURIComponent(fresh)}`);
  return fresh;
}

export function App({ config }: { config: AppConfig }) {
  const [threadId, setThreadId] = useState(threadFromUrl);
  useEffect(() => {
    const onPopState = () => setThreadId(threadFromUrl());
    window.addEventListener("popstate", onPopState);
    return () => window.removeEventListener("popstate", onPopState);
  }, []);
  const newChat = useCallback(() => {
    const fresh = randomUUID();
    window.history.pushState(null, "", `?thread=${encodeURIComponent(fresh)}`);
    setThreadId(fresh);
  }, []);

  return (
    <CopilotKitProvider runtimeUrl={config.runtimeUrl} messageFilter={newTurnOnly} enableInspector={false}>
      <Workspace key={threadId} threadId={threadId} stateKey={config.stateKey} onNewChat={newChat} />
    </CopilotKitProvider>
  );
}

interface Notice {
  kind: "info" | "error";
  text: string;
}

function lastUserText(messages: readonly Message[]): string {
  const last = [...messages].reverse().find((m) => m.role === "user");
  return typeof last?.content === "string" ? last.content : "";
}

/** A question as a notice quotes it: its opening, on one line (the chat page does the same). */
function quoted(question: string): string {
  const line = question.replace(/\s+/g, " ").trim();
  return line.length > 60 ? `${line.slice(0, 59).trimEnd()}…` : line;
}

/** In place of CopilotChat's "+" menu: nothing (see `chatInput`). */
function NoAddMenu() {
  return null;
}

/** The question to put back into the box (a new object each time, so the same text twice works). */
const ReturnedQuestion = createContext<{ text: string } | null>(null);

/**
 * CopilotChat keeps the text of its input box to itself and hands its view the setter. A turn that
 * was not saved (stopped, failed, refused) gives its question back through it, to edit or send
 * again, as the chat page does.
 */
function ChatView(props: CopilotChatViewProps) {
  const returned = useContext(ReturnedQuestion);
  const { onInputChange } = props;
  useEffect(() => {
    if (returned) onInputChange?.(returned.text);
  }, [returned, onInputChange]);
  return <CopilotChatView {...props} />;
}

function Workspace({ threadId, stateKey, onNewChat }: { threadId: string; stateKey: string | null; onNewChat: () => void }) {
  const { copilotkit } = useCopilotKit();
  const { agent } = useAgent({ agentId: AGENT_ID });
  const [progress, setProgress] = useState<Record<string, Progress>>({});
  const [notice, setNotice] = useState<Notice | null>(null);
  const [confirmedFilter, setConfirmedFilter] = useState<string[]>([]);
  const stopping = useRef<string | null>(null);
  const failure = useRef<string | null>(null);
  const unloaded = useRef(false); // the reconnect could not read the thread
  const partial = useRef(false); // so the page may lack the thread's earlier messages
  const [branches, setBranches] = useState<Record<string, Branch>>({});
  const [switching, setSwitching] = useState(false);
  const busy = useRef(false); // a run or a switch is on its way (read by the handlers)
  const saved = useRef(false); // ragstream has the thread (else there is nothing to read)
  const kept = useRef<Message[]>([]); // the messages ragstream had when the page last knew
  const [version, setVersion] = useState(0); // counts the times the branch shown changed
  const [returned, setReturned] = useState<{ text: string } | null>(null);

  useRenderTool({ name: "*", render: ToolCall }, []);
  useRagstreamInterrupts(AGENT_ID);

  // One agent serves every thread of the page: a new thread starts empty, not with what the agent
  // showed before (a run of the last thread still streaming when "New chat" was pressed, say). A
  // saved thread's messages come with the reconnect CopilotChat makes for it.
  useEffect(() => {
    agent.setMessages([]);
    agent.setState({});
  }, [agent]);

  /** ragstream's view of the thread (null: not saved yet); its `branches` become the pickers. */
  const readThread = useCallback(async (): Promise<ThreadView | null> => {
    const response = await fetch(`/api/threads/${encodeURIComponent(threadId)}`);
    if (response.status === 404) {
      setBranches({});
      return null;
    }
    if (!response.ok) throw new Error(`could not read the thread (${response.status})`);
    const view = (await response.json()) as ThreadView;
    saved.current = true;
    setBranches(view.branches ?? {});
    return view;
  }, [threadId]);

  /** Show the thread as ragstream has it: the branch's messages, its state, its versions. */
  const show = useCallback(
    (view: ThreadView | null) => {
      kept.current = view?.messages ?? [];
      agent.setMessages(kept.current);
      if (view) agent.setState(agentState(view.state, stateKey));
      setBranches(view?.branches ?? {});
      setVersion((n) => n + 1);
    },
    [agent, stateKey],
  );


  useEffect(() => {
    // A run keeps the subscribers it started with: one still going when this thread's page part
    // unmounts ("New chat" mid-answer) would call these handlers, and show this thread's messages in
    // the next one's place, unless they know they are done.
    let live = true;
    const subscription = agent.subscribe({
      onCustomEvent: ({ event }) => {
        if (!live) return;
        if (event.name !== PROGRESS_EVENT) return;
        const report = event.value as Progress;
        setProgress((current) => ({ ...current, [report.toolCallId]: report }));
      },
      onRunInitialized: () => {
        if (!live) return;
        failure.current = null;
        setNotice(null);
      },
      onMessagesSnapshotEvent: ({ event }) => {
        if (!live) return;
        // only ragstream's saved thread comes as a snapshot (a reloaded page's reconnect, a
        // stopped run's restatement): a page that joined a run under way knows it has one
        if (event.messages.length) saved.current = true;
      },
      onRunErrorEvent: ({ event }) => {
        if (!live) return;
        failure.current = event.message;
        unloaded.current = event.code === THREAD_UNAVAILABLE;
      },
      onRunFailed: ({ error }) => {
        if (!live) return;
        failure.current ??= error.message;
      },
      onRunFinalized: ({ state, messages }) => {
        if (!live) return;
        // the state is ragstream's: a stopped or failed run ends with a snapshot of the saved state
        setConfirmedFilter(ragState(state, stateKey).document_filter ?? []);
        const stopped = stopping.current;
        stopping.current = null;
        const report = (error: unknown) => setNotice({ kind: "error", text: String(error) });
        if (unloaded.current) {
          // the reconnect of a reloaded page could not read the thread: nothing was asked or lost
          unloaded.current = false;
          partial.current = true;
          setNotice({ kind: "error", text: `This conversation could not be loaded: ${failure.current}` });
          failure.current = null;
          return;
        }
        if (stopped === null && !failure.current) {
          // a run (or the reconnect of a reloaded page) ended: read the versions of what it shows
          kept.current = [...messages];
          // after a failed load the page shows the whole thread once ragstream answers again; so it
          // does when the page holds messages ragstream does not (CopilotKit adds a tool message of
          // its own for an approved call before the resume), which an edit would send back
          const whole = partial.current;
          const shown = messages.map((m) => m.id).join();
          const differs = (view: ThreadView) => view.messages.map((m) => m.id).join() !== shown;
          if (messages.length) {
            readThread().then((view) => {
              if (live && view && (whole || differs(view)) && !agent.isRunning) show(view);
            }, report);
          }
          partial.current = false;
          return;
        }
        // ragstream saves a turn whole or not at all: the page shows the thread as ragstream kept it
        // (the ids it streams are the ids it stores, so the saved messages are the ones shown)
        const question = stopped || lastUserText(messages);
        setNotice(
          stopped !== null
            ? { kind: "info", text: `Stopped. This turn (“${quoted(question)}”) was not saved.` }
            : { kind: "error", text: `${failure.current} This turn (“${quoted(question)}”) was not saved.` },
        );
        if (question) setReturned({ text: question });
        // ragstream out of reach (the likely cause of the failure): what it had when last read or
        // answered, keeping the notice that says why the turn is gone
        const restore = () => live && agent.setMessages(kept.current);
        if (saved.current) readThread().then((view) => live && show(view), restore);
        else show(null); // the thread's first turn: ragstream has nothing yet
      },
    });
    return () => {
      live = false;
      subscription.unsubscribe();
    };
  }, [agent, stateKey, readThread, show]);

  /** Run with the whole conversation `messages` (an edit or a regenerate: a new version). */
  const runVersion = useCallback(
    async (messages: Message[] | null) => {
      if (!messages || busy.current || agent.isRunning) return;
      busy.current = true;
      agent.setMessages(messages);
      setVersion((n) => n + 1);
      wholeConversation = true;
      try {
        await copilotkit.runAgent({ agent });
      } catch (error) {
        failure.current ??= error instanceof Error ? error.message : String(error);
      } finally {
        wholeConversation = false;
        busy.current = false;
      }
    },
    [agent, copilotkit],
  );

  const switchTo = useCallback(
    async (messageId: string) => {
      if (busy.current || agent.isRunning) return;
      busy.current = true;
      setSwitching(true);
      try {
        const response = await fetch(`/api/threads/${encodeURIComponent(threadId)}/switch`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ messageId }),
        });
        const body = (await response.json().catch(() => null)) as (ThreadView & { error?: { message?: string } }) | null;
        if (!response.ok || !body) throw new Error(body?.error?.message ?? `ragstream answered ${response.status}`);
        show(body);
      } catch (error) {
        setNotice({ kind: "error", text: `Could not show that version: ${error instanceof Error ? error.message : String(error)}` });
      } finally {
        busy.current = false;
        setSwitching(false);
      }
    },
    [agent, show, threadId],
  );

  // the answers' toolbars change with the messages' structure, not with every streamed token
  const answersKey = JSON.stringify(answerTools(agent.messages, branches));
  const answers = useMemo(() => JSON.parse(answersKey) as VersionsValue["answers"], [answersKey]);
  const ready = !agent.isRunning && !switching;
  const versions = useMemo<VersionsValue>(
    () => ({
      branches,
      answers,
      ready,
      edit: (message, text) => void runVersion(editedConversation(agent.messages, message.id, text, randomUUID())),
      regenerate: (message) => void runVersion(regeneratedConversation(agent.messages, message.id)),
      switchTo: (messageId) => void switchTo(messageId),
    }),
    [agent, answers, branches, ready, runVersion, switchTo],
  );

  const stop = useCallback(() => {
    stopping.current = lastUserText(agent.messages);
    copilotkit.stopAgent({ agent });
  }, [agent, copilotkit]);

  /** CopilotKit refuses a new question while a tool waits for the user's reply (the card in the
   * chat): it never reaches ragstream, so it leaves the page, which says what to do instead.
   * (`object`: CopilotChat's `onError` prop is typed as its element's DOM handler too.) */
  const refused = useCallback(
    (event: object) => {
      if (!("code" in event) || event.code !== "agent_run_failed" || !agent.pendingInterrupts.length) return;
      const question = lastUserText(agent.messages);
      agent.setMessages(kept.current);
      setNotice({ kind: "info", text: `Reply to the card in the chat first. “${quoted(question)}” was not sent.` });
      if (question) setReturned({ text: question });
    },
    [agent],
  );

  const outcomes = toolOutcomes(agent.messages); // a denied or failed call says so, not "done"
  const rag = ragState(agent.state, stateKey);
  const citations = useMemo(() => rag.citations ?? {}, [rag.citations]);
  const showError = useCallback((text: string) => setNotice({ kind: "error", text }), []);
  const messageView = useMemo(
    () => ({ assistantMessage: AssistantMessage, userMessage: UserMessage, reasoningMessage: ReasoningMessage }),
    [],
  );
  // CopilotChat's send button is a bare icon: a screen reader would only say "button". Its "+" menu
  // offers attachments and tools this page does not take, so it would only ever be disabled.
  const chatInput = useMemo(() => ({ sendButton: { "aria-label": "Send" }, addMenuButton: NoAddMenu }), []);

  return (
    <VersionsContext.Provider value={versions}>
    <CitationsProvider threadId={threadId} citations={citations} onError={showError} version={version}>
      <ProgressProvider value={progress}>
      <ToolOutcomesProvider value={outcomes}>
      <WaitingProvider>
        <div className="app">
          <header className="topbar">
            <h1>ragstream × CopilotKit</h1>
            <span className="thread" title="This thread's id (also in the address bar)">
              thread <code id="thread-id">{threadId}</code>
            </span>
            <button type="button" id="new-chat" onClick={onNewChat}>
              New chat
            </button>
          </header>
          <main className="chat-pane">
            {notice ? (
              <p id="notice" className={`notice notice-${notice.kind}`} role="status">
                {notice.text}
              </p>
            ) : null}
            <ReturnedQuestion.Provider value={returned}>
            <CopilotChat
              agentId={AGENT_ID}
              threadId={threadId}
              chatView={ChatView}
              onStop={stop}
              onError={refused}
              messageView={messageView}
              input={chatInput}
              labels={{ chatInputPlaceholder: "Ask about the documents…" }}
            />
            </ReturnedQuestion.Provider>
          </main>
          <aside className="side">
            <DocumentFilter
              names={rag.document_filter ?? []}
              confirmed={confirmedFilter}
              onChange={(names) => agent.setState(withDocumentFilter(agent.state, stateKey, names))}
            />
            <Sources />
          </aside>
        </div>
      </WaitingProvider>
      </ToolOutcomesProvider>
      </ProgressProvider>
    </CitationsProvider>
    </VersionsContext.Provider>
  );
}
