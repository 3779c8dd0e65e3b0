// The shapes the ragstream server sends, as this page uses them. The AG-UI protocol types
// (Message, Interrupt, ...) come from @ag-ui/client; these are ragstream's own payloads.
import type { Interrupt, Message } from "@ag-ui/client";

/**
 * One source the answers can cite, keyed by its number in `RagState.citations`: the same card in a
 * run's state, in `GET /threads/{id}` and in `GET /threads/{id}/state/citations/{n}`. Every key is
 * always present (docs/protocol.md, "On the wire").
 */
export interface Citation {
  index: number;
  document_id: string;
  title: string;
  uri: string;
  /** The heading path of the passage (without a first heading that repeats the title); may be empty. */
  headings: string[];
  /** The PDF page, for `#page=N` links; null for formats without pages. */
  page: number | null;
  /** Where the passage sits, for people ("page 3"); "" when the format has no such label. */
  locator: string;
  passage: string;
}

/** A hit of a search as runs send it (read the whole record by id for more). */
export interface SearchHit {
  citation: number;
  title: string;
  score: number;
  page?: number;
}

export interface SearchRecord {
  id: string;
  seq: number;
  query: string;
  documents?: string[];
  hits: SearchHit[];
}

/**
 * The thread state the server keeps in sync through STATE_SNAPSHOT / STATE_DELTA.
 *
 * Only `document_filter` belongs to the client: the server takes it from the `state` a run
 * sends and ignores the client's copy of everything else. Other keys (qa_history, archived,
 * whatever toolsets a deployment adds) are carried along untouched.
 */
export interface RagState {
  document_filter?: string[];
  citations?: Record<string, Citation>;
  searches?: Record<string, SearchRecord>;
  tool_attachments?: Record<string, ToolAttachmentRecord>;
  [key: string]: unknown;
}

/** CUSTOM event `ragstream.progress`: what a running tool is doing. */
export interface ToolProgress {
  toolCallId: string;
  tool: string;
  message: string;
  done?: number;
  total?: number;
}

/** CUSTOM event `ragstream.tool_stream`: one value a streaming tool yielded while it runs. */
export interface ToolStreamValue {
  toolCallId: string;
  tool: string;
  index: number;
  value: unknown;
}

/** A file a tool attached to its result; its bytes are at `GET /threads/{id}/attachments/{ref}`. */
export interface ToolAttachmentRecord {
  ref: string;
  name: string;
  mime_type: string;
  size: number;
  tool: string;
  tool_call_id: string;
  omitted?: string | null;
}

/** CUSTOM event `ragstream.tool_result`: what a tool's `ToolResult` shows the person (not the model). */
export interface ToolResultShown {
  toolCallId: string;
  tool: string;
  title: string | null;
  metadata: Record<string, unknown>;
  attachments: ToolAttachmentRecord[];
  isError: boolean;
  wasTruncated: boolean;
  originalBytes: number | null;
}

export interface ThreadSummary {
  threadId: string;
  title: string | null;
  updatedAt: number;
  version: number;
}

/**
 * The versions of a shown message (`GET /threads/{id}` `branches`): an edited question beside the
 * one it replaced, or a regenerated answer (its first message) beside the earlier answers. `ids`
 * are the siblings' message ids, oldest first; `index` is the one shown.
 */
export interface Branch {
  ids: string[];
  index: number;
}

/** `GET /threads/{id}`: everything a reloaded page needs to continue a thread. */
export interface ThreadView {
  threadId: string;
  title: string | null;
  /** The branch shown: the conversation the next run continues. */
  messages: Message[];
  /** For each shown message that has siblings, by its id: see `Branch`. */
  branches: Record<string, Branch>;
  /**
   * The arguments calls ran with where the user edited them on approving, by toolCallId (the calls
   * in `messages` show what the model proposed).
   */
  editedArgs: Record<string, Record<string, unknown>>;
  state: RagState;
  interrupts: Interrupt[];
  pendingToolCallIds: string[];
  activeRunId: string | null;
  /**
   * False for a new thread whose first run is under way (nothing kept yet: a page reloaded during
   * a new chat's first answer follows `activeRunId`); true once the server has saved the thread.
   */
  saved: boolean;
}

export interface DocumentInfo {
  document_id: string;
  title: string;
  uri: string;
  chunk_count: number;
}

/** `GET /documents`: one page of the documents, by title. */
export interface DocumentPage {
  documents: DocumentInfo[];
  page: number;
  pageSize: number;
  pages: number;
  total: number;
}

/** One file of a job: `pending` until done, then what the server did with it. */
export interface JobFile {
  name: string;
  status: "pending" | "added" | "updated" | "unchanged" | "deleted" | "cancelled" | "error";
  documentId: string | null;
  chunks: number;
  error: string | null;
}

/** `GET /documents/jobs/{id}`: an upload's ingestion or a sync's run, as any server worker reports it. */
export interface IngestJob {
  id: string;
  kind: "upload" | "sync";
  source: string | null;
  state: "queued" | "running" | "done" | "failed" | "cancelled";
  progress: { filesTotal: number; filesDone: number; chunksDone: number; chunksTotal: number };
  files: JobFile[];
  error: string | null;
  attempts: number;
  createdAt: number;
}

/** `GET /documents/jobs`: a page of the caller's jobs, newest first. */
export interface JobPage {
  jobs: IngestJob[];
  next: string | null;
}

/** What an approval card answers for one interrupt (ragstream's resume payload). */
/** A question a tool asks while its run goes on (CUSTOM `ragstream.question`). */
export interface LiveQuestion {
  questionId: string;
  toolCallId: string;
  tool: string;
  question: string;
  timeoutSeconds: number;
}

/** The body of `POST /threads/{id}/runs/{run}/answers`. */
export type LiveAnswer =
  { questionId: string; answer: string } | { questionId: string; declined: true; reason?: string };

export type ApprovalPayload =
  | { approved: true }
  | { approved: true; answer: string }
  | { approved: true; editedArgs: Record<string, unknown> }
  | { approved: false; reason?: string };
