// Drives a ragstream server with the real @ag-ui/client, following a JSON plan, and prints a JSON
// report. The Python tests write the plan, run this script, and assert on the report.
//
//   node drive.mjs plan.json
//
// Plan: { url, token?, headers?, threadId, steps: [...] } with steps (headers go with every request)
//   {op: "user", text}                           add a user message
//   {op: "setState", state}                      replace the client's state (a proposal)
//   {op: "run", tools?, resume?, abortAfterMs?, cutAfter?, resumeUrl?}  runAgent; record everything.
//       With cutAfter/resumeUrl the connection is cut after `cutAfter` events and the stream is
//       resumed from another server with Last-Event-ID, invisibly to the client (one stream).
//   {op: "approve", approved, editedArgs?, reason?, answer?}  resume every pending interrupt with one payload
//   {op: "toolResults", content}                 answer every pending frontend tool call
//   {op: "hydrate"}                              a fresh client built from GET /threads/{id}
//   {op: "edit", nth, text, sameId?}             replace the nth user message (0-based), dropping what
//                                                followed it (a new id unless sameId), as edit buttons do
//   {op: "truncate", after: "user"|"tool"}       drop everything after the last user (or tool) message:
//                                                the next run regenerates the answer from there
//   {op: "switch", messageId}                    POST /threads/{id}/switch, then a client built from it
//   {op: "concurrent", count, text}              `count` clients run at once on the thread
// Report: { steps: [...], unhandled: [...] }; each run step records events, types, state,
// messages, warnings and errors printed by the client, the outcome and any failure.
import { readFile } from "node:fs/promises";
import { HttpAgent } from "@ag-ui/client";

const unhandled = [];
process.on("unhandledRejection", (reason) => unhandled.push(String(reason)));

const plan = JSON.parse(await readFile(process.argv[2], "utf8"));
const headers = { ...(plan.headers ?? {}), ...(plan.token ? { Authorization: `Bearer ${plan.token}` } : {}) };
const base = plan.url;

function newAgent(initial = {}, options = {}) {
  return new HttpAgent({ url: `${base}/agui`, headers, threadId: plan.threadId, ...initial, ...options });
}

// A fetch that cuts the POST /agui stream after `cutAfter` SSE events, then continues from
// `resumeUrl` with Last-Event-ID: what a browser-side reconnect does after a dropped connection.
function resumingFetch(cutAfter, resumeUrl, log) {
  return async (url, init) => {
    const runId = JSON.parse(init.body).runId;
    const controller = new AbortController();
    const first = await fetch(url, { ...init, signal: controller.signal });
    const encoder = new TextEncoder();
    const decoder = new TextDecoder();
    const body = new ReadableStream({
      async start(out) {
        const reader = first.body.getReader();
        let buffer = "";
        let lastId = 0;
        let seen = 0;
        cut: while (true) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, { stream: true });
          let index;
          while ((index = buffer.indexOf("\n\n")) >= 0) {
            const frame = buffer.slice(0, index + 2);
            buffer = buffer.slice(index + 2);
            const id = frame.match(/^id: (\d+)$/m);
            if (!frame.includes("data:")) continue;
            if (id) lastId = Number(id[1]);
            out.enqueue(encoder.encode(frame));
            if (++seen >= cutAfter) break cut;
          }
        }
        controller.abort();
        log.cutAt = lastId;
        const rest = await fetch(`${resumeUrl}/threads/${encodeURIComponent(plan.threadId)}/runs/${runId}/events`, {
          headers: { ...headers, "Last-Event-ID": String(lastId) },
        });
        log.resumeStatus = rest.status;
        const tail = rest.body.getReader();
        while (true) {
          const { value, done } = await tail.read();
          if (done) break;
          out.enqueue(value);
        }
        out.close();
      },
    });
    return new Response(body, { status: 200, headers: { "content-type": "text/event-stream" } });
  };
}

async function runRecorded(agent, params, abortAfterMs) {
  const rec = { events: [], warnings: [], errors: [], finished: null, runError: null, failed: null, rejected: null };
  const original = { warn: console.warn, error: console.error };
  console.warn = (...args) => rec.warnings.push(args.map(String).join(" "));
  console.error = (...args) => rec.errors.push(args.map(String).join(" "));
  const sub = agent.subscribe({
    onEvent: ({ event }) => { rec.events.push(JSON.parse(JSON.stringify(event))); },
    onRunFinishedEvent: (p) => {
      rec.finished = { outcome: p.outcome, interrupts: p.interrupts ?? null, pendingToolCallIds: p.pendingToolCallIds ?? null };
    },
    onRunErrorEvent: ({ event }) => { rec.runError = { message: event.message, code: event.code ?? null }; },
    onRunFailed: ({ error }) => { rec.failed = String(error); },
  });
  let timer = null;
  if (abortAfterMs) {
    // abort `abortAfterMs` after the answer started streaming, so there is something to cut
    let firstToken = null;
    timer = setInterval(() => {
      if (firstToken === null && rec.events.some((e) => e.type === "TEXT_MESSAGE_CONTENT")) firstToken = Date.now();
      if (firstToken !== null && Date.now() - firstToken >= abortAfterMs) { clearInterval(timer); agent.abortRun(); }
    }, 5);
  }
  try {
    await agent.runAgent(params);
  } catch (error) {
    rec.rejected = String(error);
  } finally {
    if (timer) clearInterval(timer);
    sub.unsubscribe();
    Object.assign(console, original);
  }
  rec.types = rec.events.map((e) => e.type);
  rec.state = JSON.parse(JSON.stringify(agent.state));
  rec.messages = JSON.parse(JSON.stringify(agent.messages));
  rec.threadId = agent.threadId;
  return rec;
}

let agent = newAgent();
let counter = 0;
const nextId = (prefix) => `${prefix}-${Date.now().toString(36)}-${counter++}`;
const report = { steps: [] };
let lastRun = null;

for (const step of plan.steps) {
  if (step.op === "user") {
    agent.addMessage({ id: nextId("user"), role: "user", content: step.text });
    report.steps.push({ op: "user" });
  } else if (step.op === "setState") {
    agent.setState(step.state ?? agent.state);
    report.steps.push({ op: "setState" });
  } else if (step.op === "run") {
    const params = { runId: nextId("run") };
    if (step.tools) params.tools = step.tools;
    if (step.resume) params.resume = step.resume;
    const resumeLog = {};
    const runner = step.cutAfter
      ? newAgent({ initialMessages: agent.messages, initialState: agent.state }, { fetch: resumingFetch(step.cutAfter, step.resumeUrl, resumeLog) })
      : agent;
    lastRun = await runRecorded(runner, params, step.abortAfterMs);
    if (step.cutAfter) { lastRun.resumeLog = resumeLog; agent = runner; }
    lastRun.op = "run";
    lastRun.runId = params.runId;
    report.steps.push(lastRun);
  } else if (step.op === "approve") {
    const payload = { approved: step.approved };
    if (step.editedArgs) payload.editedArgs = step.editedArgs;
    if (step.reason) payload.reason = step.reason;
    if (step.answer !== undefined) payload.answer = step.answer;
    const resume = agent.pendingInterrupts.map((i) => ({ interruptId: i.id, status: "resolved", payload }));
    lastRun = await runRecorded(agent, { runId: nextId("run"), resume, tools: step.tools });
    lastRun.op = "approve";
    lastRun.resume = resume;
    report.steps.push(lastRun);
  } else if (step.op === "toolResults") {
    for (const id of lastRun?.finished?.pendingToolCallIds ?? []) {
      agent.addMessage({ id: nextId("tool"), role: "tool", toolCallId: id, content: step.content });
    }
    report.steps.push({ op: "toolResults" });
  } else if (step.op === "hydrate") {
    const response = await fetch(`${base}/threads/${encodeURIComponent(plan.threadId)}`, { headers });
    const view = await response.json();
    agent = newAgent({ initialMessages: view.messages, initialState: view.state });
    report.steps.push({ op: "hydrate", status: response.status, view });
  } else if (step.op === "edit") {
    const users = agent.messages.filter((m) => m.role === "user");
    const target = users[step.nth];
    const index = agent.messages.indexOf(target);
    const edited = { id: step.sameId ? target.id : nextId("user"), role: "user", content: step.text };
    agent.setMessages([...agent.messages.slice(0, index), edited]);
    report.steps.push({ op: "edit", id: edited.id, replaced: target.id });
  } else if (step.op === "truncate") {
    const last = agent.messages.map((m) => m.role).lastIndexOf(step.after ?? "user");
    agent.setMessages(agent.messages.slice(0, last + 1));
    report.steps.push({ op: "truncate", kept: last + 1 });
  } else if (step.op === "switch") {
    const response = await fetch(`${base}/threads/${encodeURIComponent(plan.threadId)}/switch`, {
      method: "POST",
      headers: { ...headers, "Content-Type": "application/json" },
      body: JSON.stringify({ messageId: step.messageId }),
    });
    const view = await response.json();
    agent = newAgent({ initialMessages: view.messages, initialState: view.state });
    report.steps.push({ op: "switch", status: response.status, view });
  } else if (step.op === "concurrent") {
    const agents = Array.from({ length: step.count }, () => newAgent({ initialMessages: [{ id: nextId("user"), role: "user", content: step.text }] }));
    const runs = await Promise.all(agents.map((a) => runRecorded(a, { runId: nextId("run") })));
    report.steps.push({ op: "concurrent", runs });
  } else {
    throw new Error(`unknown step ${step.op}`);
  }
}
report.unhandled = unhandled;
process.stdout.write(JSON.stringify(report));
