// The setup a new CopilotKit user writes (ragstream issue 18): CopilotRuntime v2 with an HttpAgent
// pointed at ragstream's /agui and the InMemoryAgentRunner, nothing ragstream-specific.
//
//   RAGSTREAM_AGUI_URL=http://127.0.0.1:8000/agui PORT=0 node test/plain-runtime.mjs
import { createServer } from "node:http";

process.env.COPILOTKIT_TELEMETRY_DISABLED ??= "true";
const { HttpAgent } = await import("@ag-ui/client");
const { CopilotRuntime, InMemoryAgentRunner } = await import("@copilotkit/runtime/v2");
const { createCopilotNodeListener } = await import("@copilotkit/runtime/v2/node");

const runtime = new CopilotRuntime({
  agents: { default: new HttpAgent({ url: process.env.RAGSTREAM_AGUI_URL }) },
  runner: new InMemoryAgentRunner(),
});
const server = createServer(createCopilotNodeListener({ runtime, basePath: "/api/copilotkit" }));
server.listen(Number(process.env.PORT ?? 0), "127.0.0.1", () => {
  console.log(`plain runtime on http://127.0.0.1:${server.address().port}/`);
});
