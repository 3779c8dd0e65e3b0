// The example's one Node process: CopilotKit's runtime (v2) in front of ragstream, plus the built
// React app and two read-only ragstream routes the app needs.
//
//   RAGSTREAM_AGUI_URL=http://127.0.0.1:8000/agui node server.mjs
//
// Routes:
//   /api/copilotkit/...            CopilotKit runtime (info, agent/default/run, connect, stop, ...)
//   GET /api/config                what the page must know: ragstream's state key
//   GET /api/threads/{id}          ragstream's GET /threads/{id} (the saved thread: messages, state)
//   GET /api/threads/{id}/state/{field}[/{key}]  ragstream's full state field or one item of it
//                                  (the card of an old answer's [n], beyond what runs emit)
//   POST /api/threads/{id}/switch  ragstream's switch route: show another version of a message
//                                  ({"messageId": <a sibling id>}; answers the thread view)
//   GET /api/documents             ragstream's GET /documents (names for the document filter)
//   GET /api/documents/{id}        ragstream's GET /documents/{id} (?format=file: the original a
//                                  source card's "Open" link points at)
//   everything else                the built app (dist/), index.html for unknown paths
//
// Environment:
//   RAGSTREAM_AGUI_URL   ragstream's AG-UI endpoint (default http://127.0.0.1:8000/agui)
//   RAGSTREAM_TOKEN      bearer token sent to ragstream (when ragstream has RAGSTREAM_TOKENS set);
//                        unset: the signed-in user's own Authorization header is passed on instead
//   RAGSTREAM_STATE_KEY  the key ragstream puts its state under (ragstream --state-key), if any
//   HOST, PORT           where this server listens (default 127.0.0.1:3000)
//   COPILOTKIT_TELEMETRY_DISABLED  defaults to "true" here: the example sends nothing anywhere
import { createServer } from "node:http";
import { readFile, stat } from "node:fs/promises";
import { extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";

process.env.COPILOTKIT_TELEMETRY_DISABLED ??= "true";
// Imported after the line above: CopilotKit reads the telemetry switch when its modules load.
const { CopilotRuntime } = await import("@copilotkit/runtime/v2");
const { createCopilotNodeListener } = await import("@copilotkit/runtime/v2/node");
const { RagstreamAgent, RagstreamRunner, ragstreamBase, traceHeadersOf, withTraceContext } = await import("./ragstream-agent.mjs");

const HERE = fileURLToPath(new URL(".", import.meta.url));
const DIST = resolve(process.env.RAGSTREAM_EXAMPLE_DIST ?? join(HERE, "dist"));
const AGUI_URL = process.env.RAGSTREAM_AGUI_URL || "http://127.0.0.1:8000/agui";
const RAGSTREAM = ragstreamBase(AGUI_URL);
const TOKEN = process.env.RAGSTREAM_TOKEN || "";
const STATE_KEY = process.env.RAGSTREAM_STATE_KEY || null;
const HOST = process.env.HOST || "127.0.0.1";
const PORT = Number(process.env.PORT || 3000);
const BASE_PATH = "/api/copilotkit";

const authHeaders = TOKEN ? { Authorization: `Bearer ${TOKEN}` } : {};

/** What ragstream gets to know who asks: this server's token, else the caller's own sign-in (the
 * `Authorization` header of the page's request, e.g. an OpenID Connect access token), as CopilotKit's
 * runtime itself forwards it on runs and reconnects; and the caller's trace context, so ragstream
 * records the request under the caller's trace. */
function upstreamHeaders(req) {
  const trace = traceHeadersOf(req);
  if (TOKEN) return { ...trace, ...authHeaders };
  const authorization = req.headers.authorization;
  return authorization ? { ...trace, Authorization: authorization } : trace;
}

const runtime = new CopilotRuntime({
  agents: { default: new RagstreamAgent({ url: AGUI_URL, headers: authHeaders }) },
  runner: new RagstreamRunner({ aguiUrl: AGUI_URL, stateKey: STATE_KEY }),
});
const copilotkit = createCopilotNodeListener({ runtime, basePath: BASE_PATH });

const TYPES = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".png": "image/png",
  ".json": "application/json",
  ".woff2": "font/woff2",
};

function send(res, status, body, type = "application/json", headers = {}) {
  res.writeHead(status, { "Content-Type": type, "Cache-Control": "no-store", ...headers });
  res.end(typeof body === "string" || body instanceof Buffer ? body : JSON.stringify(body));
}

async function proxyGet(req, res, path) {
  let upstream;
  try {
    upstream = await fetch(`${RAGSTREAM}${path}`, { headers: upstreamHeaders(req) });
  } catch (error) {
    send(res, 502, { error: `ragstream is not reachable at ${RAGSTREAM}: ${error.cause?.code ?? error.message}` });
    return;
  }
  // bytes, not text: a document's original may be a PDF
  const body = Buffer.from(await upstream.arrayBuffer());
  const kept = ["content-disposition", "x-content-type-options"].filter((name) => upstream.headers.has(name));
  const headers = Object.fromEntries(kept.map((name) => [name, upstream.headers.get(name)]));
  send(res, upstream.status, body, upstream.headers.get("content-type") ?? "application/json", headers);
}

/** Pass a small JSON POST on to ragstream (the switch route's body is one message id). */
async function proxyPost(req, res, path) {
  const chunks = [];
  let size = 0;
  for await (const chunk of req) {
    size += chunk.length;
    if (size > 4096) return send(res, 413, { error: "the body is too large" });
    chunks.push(chunk);
  }
  let upstream;
  try {
    upstream = await fetch(`${RAGSTREAM}${path}`, {
      method: "POST",
      headers: { ...upstreamHeaders(req), "Content-Type": "application/json" },
      body: Buffer.concat(chunks),
    });
  } catch (error) {
    send(res, 502, { error: `ragstream is not reachable at ${RAGSTREAM}: ${error.cause?.code ?? error.message}` });
    return;
  }
  send(res, upstream.status, await upstream.text(), upstream.headers.get("content-type") ?? "application/json");
}

async function serveStatic(res, pathname) {
  const wanted = normalize(decodeURIComponent(pathname)).replace(/^([/\\])+/, "");
  let file = resolve(DIST, wanted);
  if (!file.startsWith(DIST + sep) || !(await stat(file).catch(() => null))?.isFile()) {
    file = join(DIST, "index.html"); // the app owns every other path (?thread=... and reloads)
  }
  let body;
  try {
    body = await readFile(file);
  } catch {
    send(res, 500, "The app is not built: run `npm run build` (or `npm start`).\n", "text/plain");
    return;
  }
  const immutable = file.includes(`${sep}assets${sep}`);
  res.writeHead(200, {
    "Content-Type": TYPES[extname(file)] ?? "application/octet-stream",
    "Cache-Control": immutable ? "public, max-age=31536000, immutable" : "no-cache",
  });
  res.end(body);
}

const server = createServer(async (req, res) => {
  const url = new URL(req.url ?? "/", "http://localhost");
  if (url.pathname === BASE_PATH || url.pathname.startsWith(`${BASE_PATH}/`)) {
    return withTraceContext(req, () => copilotkit(req, res)); // a traced page's run joins its trace
  }
  const switchRoute = url.pathname.match(/^\/api\/threads\/([^/]+)\/switch$/);
  if (switchRoute && req.method === "POST") return proxyPost(req, res, `/threads/${switchRoute[1]}/switch`);
  if (req.method !== "GET" && req.method !== "HEAD") return send(res, 405, { error: "method not allowed" });
  if (url.pathname === "/api/config") return send(res, 200, { stateKey: STATE_KEY, runtimeUrl: BASE_PATH });
  const thread = url.pathname.match(/^\/api\/threads\/([^/]+)(\/state\/[^/]+(?:\/[^/]+)?)?$/);
  if (thread) return proxyGet(req, res, `/threads/${thread[1]}${thread[2] ?? ""}`);
  if (url.pathname === "/api/documents") return proxyGet(req, res, `/documents${url.search}`);
  const document = url.pathname.match(/^\/api\/documents\/([^/]+)$/);
  if (document) return proxyGet(req, res, `/documents/${document[1]}${url.search}`);
  if (url.pathname.startsWith("/api/")) return send(res, 404, { error: "not found" });
  return serveStatic(res, url.pathname);
});

server.listen(PORT, HOST, () => {
  const { port } = server.address();
  console.log(`CopilotKit example on http://${HOST}:${port}/ (runtime ${BASE_PATH}, agent -> ${AGUI_URL})`);
});

for (const signal of ["SIGINT", "SIGTERM"]) {
  process.on(signal, () => {
    server.close(() => process.exit(0));
    server.closeAllConnections(); // open streams would hold close() up
  });
}
