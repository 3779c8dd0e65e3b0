import type { Message } from "@copilotkit/react-core/v2";

// What the app knows about ragstream: the shape of its shared state, where that state lives in
// CopilotKit's agent state (under the configured key, or at the top), and its CUSTOM events.

/**
 * A source card: what `[n]` in an answer points at. ragstream sends every key, the same in the
 * state and in `GET /threads/{id}[/state/citations/{n}]` (its docs/protocol.md).
 */
export interface Citation {
  index: number;
  document_id: string;
  title: string;
  uri: string;
  /** The passage's heading path; may be empty. */
  headings: string[];
  /** The PDF page, for `#page=N` links; null for formats without pages. */
  page: number | null;
  /** Where the passage sits, for people ("page 3"); "" when the format has no such label. */
  locator: string;
  passage: string;
}

/** The part of ragstream's state this page renders or writes. */
export interface RagState {
  /** Document names that restrict every tool (client-owned: the page writes it). */
  document_filter?: string[];
  /** The thread's most recently cited cards by index (server-owned; older ones on request). */
  citations?: Record<string, Citation>;
}

/** What `GET /api/config` tells the page. */
export interface AppConfig {
  runtimeUrl: string;
  /** The key ragstream puts its state under (`--state-key`), or null for a flat state. */
  stateKey: string | null;
}

/** RUN_ERROR code of a reconnect that could not read the thread from ragstream (ragstream-agent.mjs). */
export const THREAD_UNAVAILABLE = "ragstream_thread_unavailable";

/** CUSTOM event a ragstream tool sends while it runs. */
export const PROGRESS_EVENT = "ragstream.progress";

export interface Progress {
  toolCallId: string;
  tool: string;
  message: string;
  done?: number;
  total?: number;
}

type AgentState = Record<string, unknown> | undefined | null;

/** ragstream's `GET /threads/{id}` (and the switch route's answer), as this page uses it. */
export interface ThreadView {
  /** The branch shown: the conversation the next run continues. */
  messages: Message[];
  state: Record<string, unknown>;
  /** For each shown message that has siblings: their ids (oldest first) and the one shown. */
  branches: Record<string, { ids: string[]; index: number }>;
}

/** A thread view's state as runs emit it: under the state key when one is set. */
export function agentState(state: Record<string, unknown>, stateKey: string | null): Record<string, unknown> {
  if (!stateKey || stateKey in state) return state;
  return { [stateKey]: state };
}

/** ragstream's part of the agent state. */
export function ragState(state: AgentState, stateKey: string | null): RagState {
  const scoped = stateKey ? state?.[stateKey] : state;
  return scoped && typeof scoped === "object" ? (scoped as RagState) : {};
}

/** The agent state with ragstream's `document_filter` replaced, everything else kept. */
export function withDocumentFilter(state: AgentState, stateKey: string | null, names: string[]): Record<string, unknown> {
  const current = { ...(state ?? {}) };
  if (!stateKey) return { ...current, document_filter: names };
  return { ...current, [stateKey]: { ...ragState(state, stateKey), document_filter: names } };
}

/** "page 3", "Backups › Retention", both, or "". */
export function whereInDocument(citation: Citation): string {
  return [citation.locator, citation.headings.join(" › ")].filter((part) => part !== "").join(" · ");
}

/** The cited document's original through this example's server (ragstream's document route), at
 * the cited page for a PDF (`#page=N`). */
export function documentLink(citation: Citation): string {
  const path = `/api/documents/${encodeURIComponent(citation.document_id)}?format=file`;
  return citation.page !== null ? `${path}#page=${citation.page}` : path;
}

/** A refused request in words: ragstream's message (its JSON error, docs/protocol.md) or the
 * example's server's (`{"error": "..."}`), and the status. */
export async function answerError(response: Response): Promise<Error> {
  const body = (await response.json().catch(() => null)) as { error?: string | { message?: string } } | null;
  const said = typeof body?.error === "string" ? body.error : body?.error?.message;
  return new Error(`${said ?? response.statusText} (${response.status})`);
}
