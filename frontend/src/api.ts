// The REST side of the server (threads, documents, stop, live answers) and the bearer token every
// request carries.
// Runs themselves go through @ag-ui/client's HttpAgent (see session.ts); it gets the same headers.
import type {
  Citation,
  DocumentPage,
  IngestJob,
  JobPage,
  LiveAnswer,
  ThreadSummary,
  ThreadView,
} from "./types";

const TOKEN_KEY = "ragstream.token";

/**
 * The bearer token, if any. A `?token=...` in the page URL is moved into sessionStorage and
 * removed from the address bar, so it survives reloads of this tab but does not end up in
 * bookmarks, screenshots or the history.
 */
export function takeToken(): string | null {
  const url = new URL(window.location.href);
  const fromUrl = url.searchParams.get("token");
  if (fromUrl) {
    sessionStorage.setItem(TOKEN_KEY, fromUrl);
    url.searchParams.delete("token");
    history.replaceState(history.state, "", url);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

export function authHeaders(token: string | null): Record<string, string> {
  return token ? { Authorization: `Bearer ${token}` } : {};
}

/** An HTTP error with the server's message (`{"error": {"message": ...}}`) when it sent one. */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
  ) {
    super(message);
    this.name = "ApiError";
  }
}

/** The human-readable message of an error body, whatever its shape. */
export function errorMessage(status: number, body: unknown): string {
  const error = (body as { error?: { message?: unknown; details?: unknown } } | null)?.error;
  if (error && typeof error.message === "string") {
    // per-file reasons, as an upload that ingested nothing gives them: "a.json: unsupported file type"
    const reasons = Array.isArray(error.details)
      ? error.details
          .map((d: { name?: unknown; error?: unknown }) =>
            typeof d?.name === "string" && typeof d?.error === "string" ? `${d.name}: ${d.error}` : null,
          )
          .filter((r): r is string => r !== null)
      : [];
    return reasons.length ? `${error.message} (${reasons.join("; ")})` : error.message;
  }
  if (typeof body === "string" && body.trim()) return body.trim();
  return `the server answered ${status}`;
}

/** The stable `code` (`thread_busy`, ...) of a non-2xx answer `@ag-ui/client` rejected a run with. */
export function errorCode(error: unknown): string | undefined {
  const body = (error as { payload?: unknown } | null)?.payload;
  const code = (body as { error?: { code?: unknown } } | null)?.error?.code;
  return typeof code === "string" ? code : undefined;
}

export class Api {
  constructor(private readonly token: string | null) {}

  get headers(): Record<string, string> {
    return authHeaders(this.token);
  }

  private async request<T>(method: string, path: string, body?: FormData | object): Promise<T> {
    const json = body !== undefined && !(body instanceof FormData);
    const response = await fetch(path, {
      method,
      body: json ? JSON.stringify(body) : body,
      headers: {
        ...this.headers,
        Accept: "application/json",
        ...(json ? { "Content-Type": "application/json" } : {}),
      },
    });
    if (response.status === 204) return undefined as T;
    const text = await response.text();
    let answer: unknown = text;
    try {
      answer = JSON.parse(text);
    } catch {
      // not JSON: keep the text for the message
    }
    if (!response.ok) throw new ApiError(response.status, errorMessage(response.status, answer));
    return answer as T;
  }

  /**
   * A page of the caller's chats, most recent first: `limit` of them from the start, or those after
   * `cursor` (the `next` of the page before); `next` is null on the last page.
   */
  async listThreads(
    limit: number,
    cursor: string | null = null,
  ): Promise<{ threads: ThreadSummary[]; next: string | null }> {
    const query = new URLSearchParams({ limit: String(limit), ...(cursor ? { cursor } : {}) });
    return await this.request<{ threads: ThreadSummary[]; next: string | null }>("GET", `/threads?${query}`);
  }

  /** The thread, or null when the server does not know it (never run, deleted, someone else's). */
  async getThread(threadId: string): Promise<ThreadView | null> {
    try {
      return await this.request<ThreadView>("GET", `/threads/${encodeURIComponent(threadId)}`);
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) return null;
      throw error;
    }
  }

  /**
   * The key the server puts its whole state under (`RAGSTREAM_STATE_KEY`), or null for a flat
   * state. Read once from the public part of `GET /capabilities`.
   */
  async stateKey(): Promise<string | null> {
    const key = (await this.described()).custom?.stateKey;
    return typeof key === "string" && key ? key : null;
  }

  /** The file suffixes the knowledge base ingests (`.md`, `.docx`, ...), for the upload picker. */
  async uploadFormats(): Promise<string[]> {
    const formats = (await this.described()).custom?.uploadFormats;
    return Array.isArray(formats) ? formats.filter((f): f is string => typeof f === "string") : [];
  }

  private capabilities: Promise<{ custom?: { stateKey?: unknown; uploadFormats?: unknown } }> | null = null;

  /** `GET /capabilities`, read once (a failed read is tried again next time). */
  private described(): Promise<{ custom?: { stateKey?: unknown; uploadFormats?: unknown } }> {
    if (!this.capabilities) {
      this.capabilities = this.request<{ custom?: { stateKey?: unknown; uploadFormats?: unknown } }>(
        "GET",
        "/capabilities",
      ).catch((error: unknown) => {
        this.capabilities = null;
        throw error;
      });
    }
    return this.capabilities;
  }

  /**
   * A citation card the thread keeps but runs no longer carry: the state holds only the most
   * recently cited cards, and an older answer's `[n]` is read here. Null when there is none.
   */
  async citation(threadId: string, index: number): Promise<Citation | null> {
    const path = `/threads/${encodeURIComponent(threadId)}/state/citations/${index}`;
    try {
      return (await this.request<{ value: Citation }>("GET", path)).value;
    } catch (error) {
      if (error instanceof ApiError && error.status === 404) return null;
      throw error;
    }
  }

  /** The bytes of a file a tool attached to its result (404 for another principal's thread). */
  async attachment(threadId: string, ref: string): Promise<Blob> {
    const path = `/threads/${encodeURIComponent(threadId)}/attachments/${encodeURIComponent(ref)}`;
    const response = await fetch(path, { headers: this.headers });
    if (!response.ok)
      throw new ApiError(response.status, errorMessage(response.status, await response.text()));
    return response.blob();
  }

  /**
   * Show another version of the conversation: `messageId` is a sibling of a shown message (from
   * the view's `branches`). The server makes the path through it (as it was last shown below it)
   * the thread's active branch, with that branch's state, and answers the thread view. 409 while
   * a run of the thread streams.
   */
  async switchBranch(threadId: string, messageId: string): Promise<ThreadView> {
    return await this.request<ThreadView>("POST", `/threads/${encodeURIComponent(threadId)}/switch`, {
      messageId,
    });
  }

  async deleteThread(threadId: string): Promise<void> {
    await this.request<void>("DELETE", `/threads/${encodeURIComponent(threadId)}`);
  }

  /**
   * A page of the documents (by title); `query` keeps those whose title or file name contains it,
   * ignoring case and spaces, as the document filter matches a name.
   */
  async listDocuments(query = "", page = 1, pageSize = 50): Promise<DocumentPage> {
    const params = new URLSearchParams({ page: String(page), page_size: String(pageSize) });
    if (query.trim()) params.set("q", query.trim());
    return await this.request<DocumentPage>("GET", `/documents?${params}`);
  }

  /**
   * Upload files for ingestion. The server stores them with a job and answers at once (202); the
   * job is then followed with `job()`. Only editors may upload (403 for everyone else).
   */
  async upload(files: File[]): Promise<IngestJob> {
    const form = new FormData();
    for (const file of files) form.append("file", file, file.name);
    return (await this.request<{ jobId: string; job: IngestJob }>("POST", "/documents", form)).job;
  }

  async job(jobId: string): Promise<IngestJob> {
    return await this.request<IngestJob>("GET", `/documents/jobs/${encodeURIComponent(jobId)}`);
  }

  /** The caller's latest jobs (uploads and the syncs they own), newest first. */
  async jobs(limit: number): Promise<JobPage> {
    return await this.request<JobPage>("GET", `/documents/jobs?limit=${limit}`);
  }

  /** Ask a queued or running job to stop; its record after asking (a running one stops shortly). */
  async cancelJob(jobId: string): Promise<IngestJob> {
    return await this.request<IngestJob>("DELETE", `/documents/jobs/${encodeURIComponent(jobId)}`);
  }

  /** The address of a document's original file, at a page for PDFs (`#page=N`). */
  documentFileUrl(documentId: string, page: number | null): string {
    const path = `/documents/${encodeURIComponent(documentId)}?format=file`;
    return page !== null ? `${path}#page=${page}` : path;
  }

  /** The address of a cited page as a picture, the passage marked on it (PDF and image documents). */
  pageImageUrl(documentId: string, page: number, passage: string): string {
    const query = new URLSearchParams({ page: String(page), mark: passage.slice(0, 600) });
    return `/documents/${encodeURIComponent(documentId)}/page?${query.toString()}`;
  }

  /** A `blob:` address of what `path` answers, fetched with this client's headers (an `<img>`
   * cannot send the Authorization header); the caller revokes it. */
  async objectUrl(path: string): Promise<string> {
    const response = await fetch(path, { headers: this.headers });
    if (!response.ok) throw new ApiError(response.status, `${response.status} ${response.statusText}`);
    return URL.createObjectURL(await response.blob());
  }

  /**
   * Open a document's original in a new tab. Without a token a plain link does it; with one, a
   * link cannot carry the Authorization header, so the file is fetched here and opened as a blob
   * (the tab is opened first, inside the click, so popup blockers let it through).
   */
  async openDocument(documentId: string, page: number | null): Promise<void> {
    const tab = window.open("", "_blank");
    const response = await fetch(this.documentFileUrl(documentId, null), { headers: this.headers });
    if (!response.ok) {
      tab?.close();
      const text = await response.text();
      let body: unknown = text;
      try {
        body = JSON.parse(text);
      } catch {
        // not JSON
      }
      throw new ApiError(response.status, errorMessage(response.status, body));
    }
    const url = URL.createObjectURL(await response.blob());
    const target = page !== null ? `${url}#page=${page}` : url;
    if (tab) tab.location.href = target;
    else window.location.assign(target);
    setTimeout(() => URL.revokeObjectURL(url), 60_000);
  }

  /** Whether requests carry a token (then links to protected files need `openDocument`). */
  get hasToken(): boolean {
    return this.token !== null;
  }

  /**
   * Ask the server to stop a run. It cancels the run where it executes, ends the stream with
   * RUN_FINISHED (outcome `cancelled`) and keeps the thread at its last saved state. Closing the
   * socket (`agent.abortRun()`) would only stop *this* tab listening; the stop route is the one
   * that works with any disconnect policy and across workers. Resolves to whether the run was still
   * going (false: it had finished, and is saved, before the stop arrived).
   */
  async stopRun(threadId: string, runId: string): Promise<boolean> {
    const answer = await this.request<{ stopping?: boolean }>("POST", `${runPath(threadId, runId)}/stop`);
    return answer?.stopping !== false; // false: the run had already ended when the stop arrived
  }

  /**
   * Answer a question a tool asks while its run goes on (`ragstream.question`): the tool continues
   * from where it asked. 409 when the run ended or the question closed (answered, timed out).
   */
  async answerQuestion(threadId: string, runId: string, answer: LiveAnswer): Promise<void> {
    await this.request<unknown>("POST", `${runPath(threadId, runId)}/answers`, answer);
  }
}

/** The path of a run's routes (`/stop`, `/answers`, `/events` below it). */
export function runPath(threadId: string, runId: string): string {
  return `/threads/${encodeURIComponent(threadId)}/runs/${encodeURIComponent(runId)}`;
}

/** A random id; crypto.randomUUID only exists in secure contexts (https or loopback). */
export function newId(): string {
  if (typeof crypto.randomUUID === "function") return crypto.randomUUID();
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}
