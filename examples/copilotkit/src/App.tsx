// The page: CopilotKit's chat (v2 `CopilotChat`) talking to ragstream through the example's
// runtime, beside the document filter and the source cards, both bound to the agent's shared state.
import {
  CopilotChat,
  CopilotKitProvider,
  randomUUID,
  useAgent,
  useCopilotKit,
  useRenderTool,
  type Message,
} from "@copilotkit/react-core/v2";
import { useCallback, useEffect, useMemo, useRef, useState } from "react";

import { CitationsProvider, CitedMarkdown, Sources } from "./citations";
import { DocumentFilter } from "./filter";
import { PROGRESS_EVENT, ragState, withDocumentFilter, type AppConfig, type Progress } from "./ragstream";
import { ProgressProvider, ToolCall } from "./tools";

const AGENT_ID = "default";

/** Send only the new turn: ragstream keeps the conversation, CopilotKit would resend all of it. */
function newTurnOnly(messages: Message[]): Message[] {
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

/** Where the last turn starts: its question(s), then everything the agent added. */
function unsavedTurnStart(messages: readonly Message[]): number {
  let start = messages.length;
  while (start > 0 && messages[start - 1].role !== "user") start -= 1;
  while (start > 0 && messages[start - 1].role === "user") start -= 1;
  return start;
}

function lastUserText(messages: readonly Message[]): string {
  const last = [...messages].reverse().find((m) => m.role === "user");
  return typeof last?.content === "string" ? last.content : "";
}

function Workspace({ threadId, stateKey, onNewChat }: { threadId: string; stateKey: string | null; onNewChat: () => void }) {
  const { copilotkit } = useCopilotKit();
  const { agent } = useAgent({ agentId: AGENT_ID });
  const [progress, setProgress] = useState<Record<string, Progress>>({});
  const [notice, setNotice] = useState<Notice | null>(null);
  const [confirmedFilter, setConfirmedFilter] = useState<string[]>([]);
  const stopping = useRef<string | null>(null);
  const failure = useRef<string | null>(null);

  useRenderTool({ name: "*", render: ToolCall }, []);

  useEffect(() => {
    const subscription = agent.subscribe({
      onCustomEvent: ({ event }) => {
        if (event.name !== PROGRESS_EVENT) return;
        const report = event.value as Progress;
        setProgress((current) => ({ ...current, [report.toolCallId]: report }));
      },
      onRunInitialized: () => {
        failure.current = null;
        setNotice(null);
      },
      onRunErrorEvent: ({ event }) => {
        failure.current = event.message;
      },
      onRunFailed: ({ error }) => {
        failure.current ??= error.message;
      },
      onRunFinalized: ({ state, messages }) => {
        // the state is ragstream's: a stopped or failed run ends with a snapshot of the saved state
        setConfirmedFilter(ragState(state, stateKey).document_filter ?? []);
        const stopped = stopping.current;
        stopping.current = null;
        if (stopped === null && !failure.current) return;
        // ragstream saves a turn whole or not at all: the page drops the turn it did not save
        const turn = unsavedTurnStart(messages);
        const question = stopped || lastUserText(messages);
        setNotice(
          stopped !== null
            ? { kind: "info", text: `Stopped. This turn (“${question}”) was not saved.` }
            : { kind: "error", text: `${failure.current} This turn (“${question}”) was not saved.` },
        );
        setTimeout(() => agent.setMessages(agent.messages.slice(0, turn)), 0);
      },
    });
    return () => subscription.unsubscribe();
  }, [agent, stateKey]);

  const stop = useCallback(() => {
    stopping.current = lastUserText(agent.messages);
    copilotkit.stopAgent({ agent });
  }, [agent, copilotkit]);

  const rag = ragState(agent.state, stateKey);
  const citations = useMemo(() => rag.citations ?? {}, [rag.citations]);
  const showError = useCallback((text: string) => setNotice({ kind: "error", text }), []);
  const messageView = useMemo(() => ({ assistantMessage: { markdownRenderer: CitedMarkdown } }), []);

  return (
    <CitationsProvider threadId={threadId} citations={citations} onError={showError}>
      <ProgressProvider value={progress}>
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
            <CopilotChat
              agentId={AGENT_ID}
              threadId={threadId}
              onStop={stop}
              messageView={messageView}
              labels={{ chatInputPlaceholder: "Ask about the documents…" }}
            />
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
      </ProgressProvider>
    </CitationsProvider>
  );
}
