// Tool calls in the conversation: name, arguments, status, and the live progress the tool reports
// with ragstream's CUSTOM `ragstream.progress` events (kept per tool call id while the page is open;
// a restored thread shows its tool calls without it, since progress is not part of the saved thread).
//
// A call whose approval or question card shows (src/interrupts.tsx) waits for the user, not for the
// tool: CopilotKit still calls it "executing" (ragstream ended the run with an interrupt before the
// tool ran), so each card marks its call as waiting while it shows, and the call's card says so.
import { createContext, useCallback, useContext, useState, type ReactNode } from "react";

import type { Progress } from "./ragstream";

const ProgressContext = createContext<Record<string, Progress>>({});

export function ProgressProvider({ value, children }: { value: Record<string, Progress>; children: ReactNode }) {
  return <ProgressContext.Provider value={value}>{children}</ProgressContext.Provider>;
}

/** What a tool call waits for: the user's approval, or the user's answer to the tool's question. */
export type Waiting = "approval" | "answer";

interface WaitingValue {
  waiting: Record<string, Waiting>;
  /** Mark a tool call as waiting for the user (or, with null, as no longer waiting). */
  mark: (toolCallId: string, waiting: Waiting | null) => void;
}

const WaitingContext = createContext<WaitingValue>({ waiting: {}, mark: () => undefined });

export function WaitingProvider({ children }: { children: ReactNode }) {
  const [waiting, setWaiting] = useState<Record<string, Waiting>>({});
  const mark = useCallback((toolCallId: string, what: Waiting | null) => {
    setWaiting((current) => {
      if ((current[toolCallId] ?? null) === what) return current;
      const { [toolCallId]: _, ...rest } = current;
      return what ? { ...rest, [toolCallId]: what } : rest;
    });
  }, []);
  return <WaitingContext.Provider value={{ waiting, mark }}>{children}</WaitingContext.Provider>;
}

/** `mark(toolCallId, waiting)` of the page's WaitingProvider (used by the interrupt cards). */
export function useMarkWaiting(): WaitingValue["mark"] {
  return useContext(WaitingContext).mark;
}

/** How a call that ran no tool or whose tool failed ended (from its tool message). */
export type ToolOutcome = "denied" | "failed";

const OutcomeContext = createContext<Record<string, ToolOutcome>>({});

/**
 * The calls that did not succeed, by tool call id: ragstream's tool message carries pydantic-ai's
 * outcome (`denied`, ...) in `encryptedValue` (AG-UI's tool message has no outcome field) and a
 * failure's message in `error`. CopilotKit only tells the render a call is "complete".
 */
export function toolOutcomes(messages: readonly unknown[]): Record<string, ToolOutcome> {
  const outcomes: Record<string, ToolOutcome> = {};
  for (const message of messages) {
    const tool = message as { role?: unknown; toolCallId?: unknown; encryptedValue?: unknown; error?: unknown };
    if (tool.role !== "tool" || typeof tool.toolCallId !== "string") continue;
    let outcome: unknown;
    try {
      outcome = typeof tool.encryptedValue === "string" ? JSON.parse(tool.encryptedValue)?.pydantic_ai?.outcome : undefined;
    } catch {
      outcome = undefined;
    }
    if (outcome === "denied") outcomes[tool.toolCallId] = "denied";
    else if (tool.error || (typeof outcome === "string" && outcome !== "success")) outcomes[tool.toolCallId] = "failed";
  }
  return outcomes;
}

export function ToolOutcomesProvider({ value, children }: { value: Record<string, ToolOutcome>; children: ReactNode }) {
  return <OutcomeContext.Provider value={value}>{children}</OutcomeContext.Provider>;
}

const OUTCOME_LABELS: Record<ToolOutcome, string> = { denied: "denied", failed: "did not complete" };

const WAITING_LABELS: Record<Waiting, string> = {
  approval: "waiting for your approval",
  answer: "waiting for your answer",
};

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
  const waiting = useContext(WaitingContext).waiting[toolCallId];
  const outcome = useContext(OutcomeContext)[toolCallId];
  const done = status === "complete";
  const label = done ? (outcome ? OUTCOME_LABELS[outcome] : "done") : waiting ? WAITING_LABELS[waiting] : "running";
  return (
    <div
      className="tool"
      data-tool-call-id={toolCallId}
      data-status={status}
      data-waiting={!done && waiting ? waiting : undefined}
      data-outcome={done ? outcome : undefined}
    >
      <div className="tool-head">
        <span className="tool-name">{name}</span>
        <span className="tool-args">{describeArgs(args)}</span>
        <span className="tool-status">{label}</span>
      </div>
      {progress ? (
        <div className="tool-progress">
          <span>{progress.message}</span>
          {progress.total ? (
            <progress max={progress.total} value={progress.done ?? 0} aria-label={`Progress of ${name}`} />
          ) : null}
        </div>
      ) : null}
    </div>
  );
}
