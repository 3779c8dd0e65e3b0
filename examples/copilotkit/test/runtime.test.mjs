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
  });
}
