// A thinking model's reasoning (AG-UI reasoning messages), shown collapsed under the answer it led
// to, as the chat page does. CopilotChat draws a reasoning message where it is in the conversation
// (before the tool calls and the answer); here it is drawn there only while the turn has no answer
// yet (the model is still thinking), and otherwise under the turn's answer, closed ("Thinking").
import { CopilotChatReasoningMessage, type CopilotChatReasoningMessageProps, type Message } from "@copilotkit/react-core/v2";
import { createContext, useContext } from "react";

/** The reasoning to show under the answer being drawn (empty: none). */
export const ReasoningContext = createContext<string[]>([]);

function hasText(message: Message): boolean {
  return message.role === "assistant" && typeof message.content === "string" && message.content.trim() !== "";
}

/** The turn around `index`: from after the question before it to before the next question. */
function turnOf(messages: readonly Message[], index: number): readonly Message[] {
  let start = index;
  while (start > 0 && messages[start - 1].role !== "user") start -= 1;
  let end = index + 1;
  while (end < messages.length && messages[end].role !== "user") end += 1;
  return messages.slice(start, end);
}

/**
 * The reasoning to draw under `message`: its turn's, when it is the turn's last message with text
 * (the answer); nothing otherwise.
 */
export function reasoningUnder(messages: readonly Message[] | undefined, message: Message): string[] {
  const all = messages ?? [];
  const index = all.findIndex((m) => m.id === message.id);
  if (index < 0 || !hasText(message)) return [];
  const turn = turnOf(all, index);
  if (turn.filter(hasText).at(-1)?.id !== message.id) return [];
  return turn.flatMap((m) => (m.role === "reasoning" && typeof m.content === "string" && m.content.trim() ? [m.content] : []));
}

/** Under an answer: its reasoning, collapsed. */
export function ReasoningUnderAnswer() {
  const thoughts = useContext(ReasoningContext);
  if (!thoughts.length) return null;
  return (
    <details className="reasoning">
      <summary>Thinking</summary>
      {thoughts.map((text, i) => (
        <p key={i} className="reasoning-text">
          {text}
        </p>
      ))}
    </details>
  );
}

/** CopilotChat's reasoning message, only while its turn has no answer to show it under. */
function RagstreamReasoningMessage(props: CopilotChatReasoningMessageProps) {
  const all = props.messages ?? [];
  const index = all.findIndex((m) => m.id === props.message.id);
  if (index >= 0 && turnOf(all, index).some(hasText)) return null;
  return <CopilotChatReasoningMessage {...props} />;
}

export const ReasoningMessage = Object.assign(RagstreamReasoningMessage, CopilotChatReasoningMessage);
