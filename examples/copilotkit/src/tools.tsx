// Tool calls in the conversation: name, arguments, status, and the live progress the tool reports
// with ragstream's CUSTOM `ragstream.progress` events (kept per tool call id while the page is open;
// a restored thread shows its tool calls without it, since progress is not part of the saved thread).
import { createContext, useContext, type ReactNode } from "react";

import type { Progress } from "./ragstream";

const ProgressContext = createContext<Record<string, Progress>>({});

export function ProgressProvider({ value, children }: { value: Record<string, Progress>; children: ReactNode }) {
  return <ProgressContext.Provider value={value}>{children}</ProgressContext.Provider>;
}

interface ToolCallProps {
  name: string;
  toolCallId: string;
  args?: Record<string, unknown>;
  status: "inProgress" | "executing" | "complete";
}

function describeArgs(args: Record<string, unknown> | undefined): string {
  if (!args) return "";
  if (typeof args.query === "string") return `“${args.query}”`;
  return Object.entries(args)
    .map(([key, value]) => `${key}: ${typeof value === "string" ? value : JSON.stringify(value)}`)
    .join(", ");
}

/** One tool call (registered for every tool with `useRenderTool({name: "*"})`). */
export function ToolCall({ name, toolCallId, args, status }: ToolCallProps) {
  const progress = useContext(ProgressContext)[toolCallId];
  const done = status === "complete";
  return (
    <div className="tool" data-tool-call-id={toolCallId} data-status={status}>
      <div className="tool-head">
        <span className="tool-name">{name}</span>
        <span className="tool-args">{describeArgs(args)}</span>
        <span className="tool-status">{done ? "done" : "running"}</span>
      </div>
      {progress ? (
        <div className="tool-progress">
          <span>{progress.message}</span>
          {progress.total ? <progress max={progress.total} value={progress.done ?? 0} /> : null}
        </div>
      ) : null}
    </div>
  );
}
