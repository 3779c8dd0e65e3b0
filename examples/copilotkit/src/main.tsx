import "@copilotkit/react-core/v2/styles.css";
import "./styles.css";

import { StrictMode } from "react";
import { createRoot } from "react-dom/client";

import { App } from "./App";
import type { AppConfig } from "./ragstream";

const root = createRoot(document.getElementById("root")!);
fetch("/api/config")
  .then(async (response) => {
    if (!response.ok) throw new Error(`GET /api/config: ${response.status}`);
    return (await response.json()) as AppConfig;
  })
  .then((config) =>
    root.render(
      <StrictMode>
        <App config={config} />
      </StrictMode>,
    ),
  )
  .catch((error: unknown) => root.render(<p className="error">The example's server did not answer: {String(error)}</p>));
