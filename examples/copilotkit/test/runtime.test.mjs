// CopilotKit's Node runtime in front of a running ragstream, driven with CopilotKit's own client
// agent (`ProxiedCopilotRuntimeAgent`, what the React provider uses) through the runtime's HTTP
// routes: three turns of one thread (the third on another topic), then a reconnect from a new
// client, as a reloaded page does. Two runtimes, each in its own process:
//   - plain: CopilotRuntime + HttpAgent + InMemoryAgentRunner, the setup of ragstream issue 18, whose
//     second turn used to kill the process (a STATE_DELTA with no snapshot earlier in the run);
//   - example: this example's server.mjs (RagstreamAgent + RagstreamRunner).
// After every step: the runtime process is alive, and the state folded by the client, by the
// runtime's runner (GET .../threads/{id}/state) and replayed by a reconnect equal the state in
// ragstream's GET /threads/{id}. The example's runtime also restores the thread after a restart.
// A second test makes versions of a conversation through each runtime, as the example's page does:
// an edit of the second question, a regenerate of its answer (from the question, then from the
// tool's result), a switch back and a turn on from there; the client's messages (ids included)
// and every folded state equal ragstream's thread after each step.
//
//   RAGSTREAM_URL=http://127.0.0.1:8000 [RAGSTREAM_STATE_KEY=ragstream] node --test test/runtime.test.mjs
// (the Python suite runs this against a ragstream it starts: tests/test_copilotkit.py)
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { randomUUID } from "node:crypto";
import { after, before, describe, test } from "node:test";
import { fileURLToPath } from "node:url";

import { ProxiedCopilotRuntimeAgent } from "@copilotkit/core";

const RAGSTREAM = process.env.RAGSTREAM_URL;
const HERE = fileURLToPath(new URL("..", import.meta.url));
const QUESTIONS = [
  "How long are nightly database backups retained?",
  "How do I restore a backup?",
  "What temperature must the bakery's walk-in cooler hold?",
];
const BASE_PATH = "/api/copilotkit";

/** Start `script` (a runtime) on a free loopback port; resolves with its URL and a handle. */
function startRuntime(script) {
  const child = spawn(process.execPath, [script], {
    cwd: HERE,
    env: { ...process.env, PORT: "0", HOST: "127.0.0.1", RAGSTREAM_AGUI_URL: `${RAGSTREAM}/agui` },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const collect = (chunk) => (output += chunk);
  child.stdout.on("data", collect);
  child.stderr.on("data", collect);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${script} did not start:\n${output}`)), 20_000);
    child.stdout.on("data", () => {
      const match = output.match(/http:\/\/127\.0\.0\.1:(\d+)\//);
      if (!match) return;
      clearTimeout(timer);
      resolve({
        url: `http://127.0.0.1:${match[1]}`,
        child,
        output: () => output,
        stop: () => child.kill("SIGTERM"),
      });
    });
    child.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`${script} exited with ${code}:\n${output}`));
    });
  });
}

async function getJson(url) {
  const response = await fetch(url);
  const body = await response.text();
  assert.equal(response.status, 200, `GET ${url}: ${response.status} ${body}`);
  return JSON.parse(body);
}

/** The runtime process still runs and answers. */
async function assertAlive(runtime) {
  assert.equal(runtime.child.exitCode, null, `the runtime process exited:\n${runtime.output()}`);
  assert.equal(runtime.child.signalCode, null, `the runtime process was killed:\n${runtime.output()}`);
  const info = await getJson(`${runtime.url}${BASE_PATH}/info`);
  assert.ok(info.agents.default, "the runtime lists the default agent");
}

/** ragstream's part of a state: under RAGSTREAM_STATE_KEY when the server uses one. */
function ragState(state) {
  const key = process.env.RAGSTREAM_STATE_KEY;
  return (key ? state?.[key] : state) ?? {};
}

function textOf(message) {
  return typeof message?.content === "string" ? message.content : "";
}

/** What a user sees of a conversation: each user question and each answer's text. */
function transcript(messages) {
  return messages
    .filter((m) => (m.role === "user" || m.role === "assistant") && textOf(m))
    .map((m) => `${m.role}: ${textOf(m)}`);
}

/** Run `step`; a rejection is recorded as a problem (the checks after it say what went wrong). */
async function run(step, problems) {
  try {
    await step();
  } catch (error) {
    problems.push(`rejected: ${error}`);
  }
}

function client(runtime, threadId) {
  const agent = new ProxiedCopilotRuntimeAgent({
    runtimeUrl: `${runtime.url}${BASE_PATH}`,
    agentId: "default",
    transport: "rest",
    threadId,
  });
  const problems = [];
  agent.subscribe({
    onRunErrorEvent: ({ event }) => problems.push(`RUN_ERROR: ${event.message}`),
    onRunFailed: ({ error }) => problems.push(`run failed: ${error}`),
  });
  return { agent, problems };
}

for (const [name, script, durable] of [
  ["plain runtime (HttpAgent + InMemoryAgentRunner)", "test/plain-runtime.mjs", false],
  ["the example's runtime (server.mjs)", "server.mjs", true],
]) {
  describe(name, () => {
    let runtime;
    before(async () => {
      assert.ok(RAGSTREAM, "set RAGSTREAM_URL to a running ragstream (http://127.0.0.1:PORT)");
      runtime = await startRuntime(script);
    });
    after(async () => {
      await new Promise((resolve) => setTimeout(resolve, 300)); // let a dying process finish dying
      if (runtime && (runtime.child.exitCode !== null || runtime.child.signalCode !== null)) {
        process.stderr.write(`\n${script} died during the test; its output:\n${runtime.output()}\n`);
      }
      runtime?.stop();
    });

    test(`three turns and a reconnect of one thread${durable ? ", and one after a restart" : ""}`, async () => {
      const threadId = `node-${randomUUID()}`;
      const { agent, problems } = client(runtime, threadId);
      let saved;
      for (const [turn, question] of QUESTIONS.entries()) {
        agent.addMessage({ id: randomUUID(), role: "user", content: question });
        await run(() => agent.runAgent(), problems);
        await assertAlive(runtime);
        assert.deepEqual(problems, [], `turn ${turn + 1} failed`);

        saved = await getJson(`${RAGSTREAM}/threads/${encodeURIComponent(threadId)}`);
        const users = saved.messages.filter((m) => m.role === "user").map(textOf);
        assert.deepEqual(users, QUESTIONS.slice(0, turn + 1), "ragstream saved each question once");
        assert.ok(Object.keys(ragState(saved.state).citations ?? {}).length > 0, "the answers cite sources");
        assert.deepEqual(transcript(agent.messages), transcript(saved.messages), `turn ${turn + 1}: the client's conversation`);
        assert.deepEqual(agent.state, saved.state, `turn ${turn + 1}: the state the client folded`);
        const folded = await getJson(`${runtime.url}${BASE_PATH}/threads/${encodeURIComponent(threadId)}/state`);
        assert.deepEqual(folded.state, saved.state, `turn ${turn + 1}: the state the runtime's runner folded`);
      }

      // a new client (a reloaded page) reconnects to the thread
      const { agent: reloaded, problems: reconnectProblems } = client(runtime, threadId);
      await run(() => reloaded.connectAgent(), reconnectProblems);
      await assertAlive(runtime);
      assert.deepEqual(reconnectProblems, []);
      assert.deepEqual(reloaded.state, saved.state, "the reconnect's state");
      assert.deepEqual(transcript(reloaded.messages), transcript(saved.messages), "the reconnect's conversation");

      // and the thread goes on from there
      reloaded.addMessage({ id: randomUUID(), role: "user", content: "Who restores backups?" });
      await run(() => reloaded.runAgent(), reconnectProblems);
      await assertAlive(runtime);
      assert.deepEqual(reconnectProblems, []);
      const last = await getJson(`${RAGSTREAM}/threads/${encodeURIComponent(threadId)}`);
      assert.equal(last.messages.filter((m) => m.role === "user").length, QUESTIONS.length + 1);
      assert.deepEqual(reloaded.state, last.state);

      if (!durable) return; // the in-memory runner's record of the thread dies with its process
      runtime.stop();
      await new Promise((resolve) => runtime.child.once("exit", resolve));
      runtime = await startRuntime(script);
      const { agent: restarted, problems: restartProblems } = client(runtime, threadId);
      await run(() => restarted.connectAgent(), restartProblems);
      assert.deepEqual(restartProblems, []);
      assert.deepEqual(restarted.state, last.state, "the reconnect after a restart: state");
      assert.deepEqual(transcript(restarted.messages), transcript(last.messages), "... and conversation");
    });

    test("edit, regenerate and switch back through the runtime", async () => {
      const threadId = `node-versions-${randomUUID()}`;
      const { agent, problems } = client(runtime, threadId);
      for (const question of QUESTIONS) {
        agent.addMessage({ id: randomUUID(), role: "user", content: question });
        await step(() => agent.runAgent(), "a turn");
      }
      const original = await assertSameThread("three turns");
      const secondId = agent.messages.filter((m) => m.role === "user")[1].id;

      // edit the second question: the conversation before it, the new text with a new id
      const edited = { id: randomUUID(), role: "user", content: EDITED };
      agent.setMessages([...agent.messages.slice(0, indexOf(agent.messages, secondId)), edited]);
      await step(() => agent.runAgent(), "the edit");
      let saved = await assertSameThread("after the edit");
      assert.deepEqual(users(saved.messages), [QUESTIONS[0], EDITED]);
      assert.deepEqual(saved.branches[edited.id], { ids: [secondId, edited.id], index: 1 });

      // regenerate its answer: the conversation up to and including the question
      const firstAnswer = saved.messages[indexOf(saved.messages, edited.id) + 1].id;
      agent.setMessages(agent.messages.slice(0, indexOf(agent.messages, edited.id) + 1));
      await step(() => agent.runAgent(), "the regenerate");
      saved = await assertSameThread("after the regenerate");
      const secondAnswer = saved.messages[indexOf(saved.messages, edited.id) + 1].id;
      assert.notEqual(secondAnswer, firstAnswer);
      assert.deepEqual(saved.branches[secondAnswer], { ids: [firstAnswer, secondAnswer], index: 1 });

      // regenerate from the tool's result: the answer is made again from there, beside the old one
      const result = agent.messages.findLastIndex((m) => m.role === "tool");
      const oldFinal = agent.messages[result + 1].id;
      agent.setMessages(agent.messages.slice(0, result + 1));
      await step(() => agent.runAgent(), "the regenerate from the tool result");
      saved = await assertSameThread("after the regenerate from the tool result");
      const newFinal = saved.messages.at(-1).id;
      assert.notEqual(newFinal, oldFinal);
      assert.deepEqual(saved.branches[newFinal], { ids: [oldFinal, newFinal], index: 1 });

      // switch back to the original second question (ragstream's route), then go on from there
      const response = await fetch(`${RAGSTREAM}/threads/${encodeURIComponent(threadId)}/switch`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify({ messageId: secondId }),
      });
      assert.equal(response.status, 200, await response.clone().text());
      const switched = await response.json();
      assert.deepEqual(shown(switched.messages), shown(original.messages), "the original branch, as it was");
      assert.deepEqual(switched.state, original.state, "... with its state");
      if (durable) {
        // the example's runtime restores the switched branch on a reconnect (a reloaded page)
        const { agent: reloaded, problems: reloadProblems } = client(runtime, threadId);
        await run(() => reloaded.connectAgent(), reloadProblems);
        assert.deepEqual(reloadProblems, []);
        assert.deepEqual(shown(reloaded.messages), shown(switched.messages), "the reconnect shows the branch");
        assert.deepEqual(reloaded.state, switched.state);
      }
      agent.setMessages(switched.messages);
      agent.setState(switched.state);
      agent.addMessage({ id: randomUUID(), role: "user", content: "Who restores backups?" });
      await step(() => agent.runAgent(), "a turn after the switch");
      saved = await assertSameThread("a turn after the switch");
      assert.deepEqual(users(saved.messages), [...QUESTIONS, "Who restores backups?"]);

      /** Run `action` through the runtime: no problem, and the runtime process is still up. */
      async function step(action, what) {
        await run(action, problems);
        await assertAlive(runtime);
        assert.deepEqual(problems, [], `${what} failed`);
      }

      /** The client's messages (ids included) and every folded state are ragstream's thread. */
      async function assertSameThread(what) {
        const thread = await getJson(`${RAGSTREAM}/threads/${encodeURIComponent(threadId)}`);
        assert.deepEqual(shown(agent.messages), shown(thread.messages), `${what}: the client's messages`);
        assert.deepEqual(agent.state, thread.state, `${what}: the state the client folded`);
        const folded = await getJson(`${runtime.url}${BASE_PATH}/threads/${encodeURIComponent(threadId)}/state`);
        assert.deepEqual(folded.state, thread.state, `${what}: the state the runtime's runner folded`);
        assert.ok(Object.keys(ragState(thread.state).citations ?? {}).length > 0, `${what}: the answers cite sources`);
        return thread;
      }
    });
  });
}

const EDITED = "When does the Northwind Observatory open to visitors?";

/** A conversation as ids, roles and texts (a tool result by its call). */
function shown(messages) {
  return messages.map((m) => [m.id, m.role, m.role === "tool" ? m.toolCallId : textOf(m)]);
}

function users(messages) {
  return messages.filter((m) => m.role === "user").map(textOf);
}

function indexOf(messages, id) {
  const at = messages.findIndex((m) => m.id === id);
  assert.ok(at >= 0, `message ${id} is not in the conversation`);
  return at;
}
