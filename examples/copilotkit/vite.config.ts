import react from "@vitejs/plugin-react";
import { defineConfig } from "vite";

// `npm run dev` serves the app with hot reload and sends /api to the example's server (`npm run serve`).
export default defineConfig({
  plugins: [react()],
  server: { proxy: { "/api": `http://127.0.0.1:${process.env.PORT ?? 3000}` } },
  build: { outDir: "dist", emptyOutDir: true, chunkSizeWarningLimit: 4096 },
});
