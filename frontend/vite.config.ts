// Builds the chat page into ../server/static, which the Python server serves at "/".
// `npm run dev` serves the page with hot reload and forwards the API to a running server
// (RAGSTREAM_URL, default http://127.0.0.1:8000).
import { defineConfig } from "vite";

const api = process.env.RAGSTREAM_URL ?? "http://127.0.0.1:8000";

export default defineConfig({
  build: {
    outDir: "../server/static",
    emptyOutDir: true,
    target: "es2022",
  },
  server: {
    proxy: Object.fromEntries(["/agui", "/threads", "/documents", "/health"].map((path) => [path, api])),
  },
});
