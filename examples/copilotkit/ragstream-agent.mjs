// What the example's CopilotKit runtime adds to a plain `HttpAgent` + `InMemoryAgentRunner`, for
// ragstream: a Stop that asks ragstream to stop the run (instead of only dropping the connection),
// and a reconnect that restores the thread from ragstream's saved record. See NOTES.md.
import { AsyncLocalStorage } from "node:async_hooks";

import { HttpAgent } from "@ag-ui/client";
import { InMemoryAgentRunner } from "@copilotkit/runtime/v2";
import { Observable, catchError, concat, from, map, skip, switchMap, throwError } from "rxjs";

/** ragstream's base URL (`http://host:port`) from its AG-UI endpoint (`.../agui`). */
export function ragstreamBase(aguiUrl) {
  return aguiUrl.replace(/\/agui\/?$/, "");
}

/**
 * The W3C trace context (`traceparent`, `tracestate`) of the request being handled. CopilotKit's
 * runtime forwards only `authorization` and `x-*` headers to the agent, so a traced page's run would
 * start a trace of its own in ragstream; `server.mjs` handles each runtime request inside
 * `withTraceContext(req, ...)`, and every request to ragstream that a runtime request causes (the
 * run, a Stop, a reconnect's read of the thread) sends that context on.
 */
const traceContext = new AsyncLocalStorage();

/** The trace context headers of `req` (`traceparent`, `tracestate`; none when it sent none). */
export function traceHeadersOf(req) {
  const names = ["traceparent", "tracestate"].filter((name) => typeof req.headers[name] === "string");
  return Object.fromEntries(names.map((name) => [name, req.headers[name]]));
}

/** Handle `req` with its trace context (`traceparent`, `tracestate`) known to the agents it runs. */
export function withTraceContext(req, handle) {
  return traceContext.run(traceHeadersOf(req), handle);
}

/** The trace context headers of the runtime request being handled (see `withTraceContext`). */
function currentTraceHeaders() {
  return traceContext.getStore() ?? {};
}

/**
 * An `HttpAgent` for ragstream's `POST /agui` whose Stop goes through ragstream's stop route.
 *
 * CopilotKit's Stop reaches the runtime as `runner.stop()`, which calls `agent.abortRun()`. A plain
 * `HttpAgent` aborts its request; ragstream then sees a dropped client, which it treats by its
 * disconnect policy (`finish` keeps the run going and saves it: right for a flaky network, wrong for
 * a Stop). This agent asks `POST /threads/{id}/runs/{run}/stop` instead: the run ends at once with
 * RUN_FINISHED (`cancelled`) after a snapshot of the thread's last saved state, so the runner's
 * record of the run ends the way ragstream's does. It falls back to aborting when the stop request
 * cannot be made.
 */
export class RagstreamAgent extends HttpAgent {
  run(input) {
    // CopilotKit's useInterrupt resumes an interrupted run under that run's id; ragstream keeps
    // every run's id (its event log) and refuses one it has seen (409 run_exists). A resume goes
    // to ragstream as a run of its own, and its events come back under the id CopilotKit expects.
    const runId = input.resume?.length ? `${input.runId}.resume-${crypto.randomUUID()}` : input.runId;
    this.activeRun = { threadId: input.threadId, runId };
    this.traceHeaders = currentTraceHeaders(); // this agent is the runtime's clone for one request
    const asSent = (event) => (event.runId === runId && runId !== input.runId ? { ...event, runId: input.runId } : event);
    return super.run({ ...input, runId }).pipe(
      map(asSent),
      catchError((error) => throwError(() => readableError(error, this.url))),
    );
  }

  requestInit(input) {
    const init = super.requestInit(input);
    return { ...init, headers: { ...this.traceHeaders, ...init.headers } };
  }

  abortRun() {
    const run = this.activeRun;
    if (!run) {
      super.abortRun();
      return;
    }
    const stopUrl = `${ragstreamBase(this.url)}/threads/${encodeURIComponent(run.threadId)}/runs/${encodeURIComponent(run.runId)}/stop`;
    // the Stop request's own trace context (runner.stop() runs while the runtime handles it)
    fetch(stopUrl, { method: "POST", headers: { ...currentTraceHeaders(), ...this.headers } })
      .then((response) => {
        // 202: stopping, the stream ends by itself. Anything else (the run already ended, or
        // another principal's thread): nothing to wait for, so drop the connection.
        if (response.status !== 202) super.abortRun();
      })
      .catch(() => super.abortRun());
  }
}

/**
 * A run ragstream refused or could not be reached for, in words a user can read: the runtime ends
 * the run with a RUN_ERROR carrying this error's message, which the page shows. `HttpAgent` says
 * `HTTP 429: {"error":{...}}` (ragstream's JSON error, docs/protocol.md) or `fetch failed`;
 * this keeps the status and ragstream's own message (`'alice' started 10 runs this minute, ...`,
 * `thread '...' is busy with another run; ...`), or names the address it could not reach.
 */
export function readableError(error, aguiUrl) {
  if (typeof error?.status === "number") {
    const detail = error.payload?.error;
    const said = typeof detail?.message === "string" ? detail.message : typeof error.payload === "string" ? error.payload : "";
    const readable = new Error(sentence(`ragstream refused the run (${error.status}${detail?.code ? ` ${detail.code}` : ""})${said ? `: ${said}` : ""}`));
    return Object.assign(readable, { status: error.status, payload: error.payload });
  }
  if (error instanceof TypeError && error.cause) {
    return new Error(sentence(`ragstream is not reachable at ${ragstreamBase(aguiUrl)} (${error.cause.code ?? error.cause.message})`));
  }
  return error;
}

/** The text ending as a sentence (the page goes on after it: "... This turn was not saved."). */
function sentence(text) {
  return /[.!?]$/.test(text) ? text : `${text}.`;
}

/** ragstream's saved thread (`GET /threads/{id}`) as `{messages, state}`, or null when unknown. */
export async function fetchThread(base, threadId, headers = {}) {
  let response;
  try {
    response = await fetch(`${base}/threads/${encodeURIComponent(threadId)}`, { headers });
  } catch (error) {
    throw new Error(sentence(`ragstream is not reachable at ${base} (${error.cause?.code ?? error.message})`));
  }
  if (response.status === 404) return null;
  if (!response.ok) {
    const body = await response.text();
    let error = null;
    try {
      error = JSON.parse(body)?.error ?? null;
    } catch {}
    const said = typeof error?.message === "string" ? error.message : body;
    throw new Error(sentence(`ragstream refused to show the thread (${response.status}${error?.code ? ` ${error.code}` : ""}): ${said}`));
  }
  return response.json();
}

/** RUN_ERROR code of a reconnect that could not read the thread from ragstream (the page says so). */
export const THREAD_UNAVAILABLE = "ragstream_thread_unavailable";

/** The state as runs emit it: under `stateKey` when one is set. */
export function emittedState(state, stateKey) {
  if (!stateKey || (state && typeof state === "object" && stateKey in state)) return state ?? {};
  return { [stateKey]: state ?? {} };
}

/**
 * CopilotKit's `InMemoryAgentRunner`, whose reconnect (`/agent/{id}/connect`, what a reloaded page
 * asks for) is answered from ragstream's saved thread instead of this process's memory.
 *
 * Runs go through the in-memory runner unchanged. A connect replays ragstream's `GET /threads/{id}`
 * as one finished run (MESSAGES_SNAPSHOT, STATE_SNAPSHOT): it survives a restart of this process,
 * and it leaves out what ragstream did not keep (a stopped or failed turn, which the runner's memory
 * still holds). A connect to a thread that is running here then joins that run: its events so far
 * and its live tail, without the runner's replay of the thread's earlier runs.
 */
export class RagstreamRunner extends InMemoryAgentRunner {
  constructor({ aguiUrl, stateKey = null, ...options }) {
    super(options);
    this.base = ragstreamBase(aguiUrl);
    this.stateKey = stateKey;
  }

  connect(request) {
    return from(this.isRunning({ threadId: request.threadId })).pipe(
      switchMap((running) =>
        running ? concat(this.#fromRagstream(request), this.#liveRun(request)) : this.#fromRagstream(request),
      ),
    );
  }

  /** The run under way: the runner's connect after the earlier runs it replays first (exactly the
   * events `getThreadEvents` compacts them to, see CopilotKit's `in-memory.ts`). */
  #liveRun(request) {
    const replayed = this.getThreadEvents(request.threadId).length;
    return super.connect(request).pipe(skip(replayed));
  }

  #fromRagstream(request) {
    return new Observable((subscriber) => {
      // request.headers: the agent's (the token, when set) and what the runtime forwards, which
      // leaves out the connect request's trace context
      fetchThread(this.base, request.threadId, { ...currentTraceHeaders(), ...request.headers }).then(
        (thread) => {
          if (thread) {
            const runId = `restore-${crypto.randomUUID()}`;
            const threadId = request.threadId;
            subscriber.next({ type: "RUN_STARTED", threadId, runId });
            subscriber.next({ type: "MESSAGES_SNAPSHOT", messages: thread.messages });
            subscriber.next({ type: "STATE_SNAPSHOT", snapshot: emittedState(thread.state, this.stateKey) });
            // a thread waiting on the user (a tool's approval or question) ends as its run did
            const interrupts = thread.interrupts ?? [];
            const outcome = interrupts.length ? { outcome: { type: "interrupt", interrupts } } : {};
            subscriber.next({ type: "RUN_FINISHED", threadId, runId, ...outcome });
          }
          subscriber.complete();
        },
        (error) => {
          // said to the page: a reconnect that only ended would show the thread as empty
          subscriber.next({ type: "RUN_ERROR", message: error.message, code: THREAD_UNAVAILABLE });
          subscriber.complete();
        },
      );
    });
  }
}
