// Human in the loop: ragstream ends a run with an AG-UI interrupt when a tool needs the user's
// approval or asks the user a question (its docs/tools.md, "Human in the loop and your own tools").
// CopilotKit's `useInterrupt` shows this card in the chat; Approve, Deny or an answer resumes the
// run with `resume: [{interruptId, status: "resolved", payload}]`, the payload ragstream reads.
import { useInterrupt, type InterruptRenderProps } from "@copilotkit/react-core/v2";
import { useEffect, useState, type FormEvent } from "react";

import { useMarkWaiting } from "./tools";

/** What ragstream's interrupt carries in its metadata (a tool's question, or an approval). */
interface InterruptMetadata {
  kind?: string;
  question?: string;
  tool?: string;
}

function InterruptCard({ interrupt, resolve }: Pick<InterruptRenderProps, "interrupt" | "resolve">) {
  const [answer, setAnswer] = useState("");
  const [sent, setSent] = useState(false);
  const markWaiting = useMarkWaiting();
  const metadata = (interrupt?.metadata ?? {}) as InterruptMetadata;
  const question = metadata.kind === "question";
  // the tool call waits for the user while the card shows and has not been answered
  const toolCallId = interrupt?.toolCallId;
  useEffect(() => {
    if (!toolCallId || sent) return;
    markWaiting(toolCallId, question ? "answer" : "approval");
    return () => markWaiting(toolCallId, null);
  }, [markWaiting, toolCallId, sent, question]);
  if (!interrupt) return null;
  const reply = (payload: Record<string, unknown>) => {
    setSent(true);
    void resolve(payload, interrupt.id);
  };
  const submit = (event: FormEvent) => {
    event.preventDefault();
    if (answer.trim()) reply({ approved: true, answer: answer.trim() });
  };
  const text = interrupt.message ?? (question ? metadata.question : undefined) ?? interrupt.reason;
  return (
    <div className="interrupt" role="group" aria-label={question ? "The assistant asks you" : "Approval needed"} data-interrupt-id={interrupt.id}>
      {/* announced as it appears: the run waits for the user */}
      <p className="interrupt-title" role="alert">
        {question ? "The assistant asks you" : "Approval needed"}
      </p>
      <p className="interrupt-message">{text}</p>
      {question ? (
        <form className="interrupt-actions" onSubmit={submit}>
          <input aria-label="Your answer" value={answer} disabled={sent} onChange={(event) => setAnswer(event.target.value)} />
          <button type="submit" className="primary" disabled={sent || !answer.trim()}>
            Answer
          </button>
          <button type="button" disabled={sent} onClick={() => reply({ approved: false, reason: "The user declined to answer." })}>
            Decline
          </button>
        </form>
      ) : (
        <div className="interrupt-actions">
          <button type="button" className="primary" disabled={sent} onClick={() => reply({ approved: true })}>
            Approve
          </button>
          <button type="button" disabled={sent} onClick={() => reply({ approved: false, reason: "The user denied it." })}>
            Deny
          </button>
        </div>
      )}
    </div>
  );
}

/** Show ragstream's interrupts (approvals, tools' questions) in the chat and resume with the reply. */
export function useRagstreamInterrupts(agentId: string) {
  useInterrupt({ agentId, render: ({ interrupt, resolve }) => <InterruptCard interrupt={interrupt} resolve={resolve} /> });
}
