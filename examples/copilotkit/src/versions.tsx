// Versions of a conversation: edit a question, make an answer again, and `‹ n/m ›` between the
// versions, on CopilotKit's own message views. ragstream keeps the conversation as a tree: the
// messages a run sends select the branch (an edit or a regenerate branches off where they leave
// the stored conversation), `GET /threads/{id}` says which shown messages have siblings
// (`branches`), and `POST /threads/{id}/switch` shows another one. The page wires CopilotKit's
// slots (`onEditMessage`, `onRegenerate`, `branchIndex` / `numberOfBranches` / `onSwitchToBranch`)
// to those; see App.tsx for the handlers and README.md for what the user sees.
import {
  CopilotChatAssistantMessage,
  CopilotChatUserMessage,
  type CopilotChatAssistantMessageProps,
  type CopilotChatUserMessageProps,
  type Message,
} from "@copilotkit/react-core/v2";
import { createContext, useContext, useState, type ComponentProps, type FormEvent, type KeyboardEvent } from "react";

import { CitedMarkdown } from "./citations";
import { ReasoningContext, ReasoningUnderAnswer, reasoningUnder } from "./reasoning";

/** The versions of one shown message (`GET /threads/{id}` `branches`): sibling ids, the one shown. */
export interface Branch {
  ids: string[];
  index: number;
}

/** What goes on an answer's toolbar: "Regenerate" (when it has a question) and version pickers. */
export interface AnswerTools {
  regenerate: boolean;
  /** Each message of the answer that has versions (after a regenerate, its first message). */
  pickers: [string, Branch][];
}

export interface VersionsValue {
  /** The versions of shown messages, by message id. */
  branches: Record<string, Branch>;
  /** The answers' toolbars, by the id of each answer's last message with text. */
  answers: Record<string, AnswerTools>;
  /** Nothing runs and no switch is on its way: the buttons may act. */
  ready: boolean;
  edit: (message: Message, text: string) => void;
  regenerate: (message: Message) => void;
  switchTo: (messageId: string) => void;
}

export const VersionsContext = createContext<VersionsValue>({
  branches: {},
  answers: {},
  ready: false,
  edit: () => {},
  regenerate: () => {},
  switchTo: () => {},
});

/**
 * The toolbar of each answer. An answer is what follows a question up to the next one; its toolbar
 * is on its last message with text (CopilotKit shows none on a message that only calls tools), and
 * carries the pickers of all its messages that have versions.
 */
export function answerTools(messages: readonly Message[], branches: Record<string, Branch>): Record<string, AnswerTools> {
  const tools: Record<string, AnswerTools> = {};
  let asked = false;
  let turn: Message[] = [];
  const close = () => {
    const last = turn.filter((m) => m.role === "assistant" && typeof m.content === "string" && m.content.trim()).at(-1);
    if (last) {
      const pickers = turn.flatMap((m): [string, Branch][] => (branches[m.id] ? [[m.id, branches[m.id]]] : []));
      tools[last.id] = { regenerate: asked, pickers };
    }
    turn = [];
  };
  for (const message of messages) {
    if (message.role === "user") {
      close();
      asked = true;
    } else {
      turn.push(message);
    }
  }
  close();
  return tools;
}

/** The messages to send for an edit: those before the question, then the new text. */
export function editedConversation(messages: readonly Message[], messageId: string, text: string, newId: string): Message[] | null {
  const at = messages.findIndex((m) => m.id === messageId);
  if (at < 0) return null;
  const before = messages.slice(0, at);
  // A history with no answer and no id the thread stores reads as a new turn of the branch shown,
  // so the first question keeps its id when edited (ragstream's docs/protocol.md, "Edit, regenerate, branches").
  const first = !before.some((m) => m.role === "user" || m.role === "assistant");
  return [...before, { id: first ? messageId : newId, role: "user", content: text }];
}

/** The messages to send to make an answer again: up to and including its question. */
export function regeneratedConversation(messages: readonly Message[], answerId: string): Message[] | null {
  const at = messages.findIndex((m) => m.id === answerId);
  let question = at;
  while (question >= 0 && messages[question].role !== "user") question -= 1;
  return question < 0 ? null : messages.slice(0, question + 1);
}

function textOf(message: Message): string {
  if (typeof message.content === "string") return message.content;
  if (!Array.isArray(message.content)) return "";
  return message.content.map((part) => (part.type === "text" ? part.text : "")).join("");
}

/** `‹ n/m ›` for an answer's versions (CopilotKit's own `BranchNavigation` serves the questions). */
function AnswerPicker({ id, branch, disabled, onSwitch }: { id: string; branch: Branch; disabled: boolean; onSwitch: (id: string) => void }) {
  const shown = branch.index + 1;
  const count = branch.ids.length;
  return (
    <div className="answer-versions" role="group" data-testid="answer-branch-navigation" data-branch-of={id} aria-label={`Version ${shown} of ${count} of this answer`}>
      <button type="button" aria-label="Previous version of this answer" disabled={disabled || branch.index === 0} onClick={() => onSwitch(branch.ids[branch.index - 1])}>
        ‹
      </button>
      <span className="versions-count">
        {shown}/{count}
      </span>
      <button type="button" aria-label="Next version of this answer" disabled={disabled || branch.index === count - 1} onClick={() => onSwitch(branch.ids[branch.index + 1])}>
        ›
      </button>
    </div>
  );
}

/** CopilotKit's assistant message with ragstream's citations, "Regenerate" and the answer's pickers. */
function RagstreamAssistantMessage(props: CopilotChatAssistantMessageProps) {
  const { answers, ready, regenerate, switchTo } = useContext(VersionsContext);
  const tools = answers[props.message.id];
  return (
    <ReasoningContext.Provider value={reasoningUnder(props.messages, props.message)}>
      <CopilotChatAssistantMessage
        {...props}
        markdownRenderer={AnswerWithReasoning}
        onRegenerate={tools?.regenerate ? regenerate : undefined}
        additionalToolbarItems={tools?.pickers.map(([id, branch]) => (
          <AnswerPicker key={id} id={id} branch={branch} disabled={!ready} onSwitch={switchTo} />
        ))}
      />
    </ReasoningContext.Provider>
  );
}

/** The answer's text with its citations, and under it the reasoning that led to it (collapsed). */
function AnswerWithReasoning(props: ComponentProps<typeof CitedMarkdown>) {
  return (
    <>
      <CitedMarkdown {...props} />
      <ReasoningUnderAnswer />
    </>
  );
}

/**
 * CopilotKit's user message with Edit and its versions. Edit opens the question in a text box in
 * place; Send asks the edited question (a new version beside the old one).
 */
function RagstreamUserMessage(props: CopilotChatUserMessageProps) {
  const { branches, ready, edit, switchTo } = useContext(VersionsContext);
  const [draft, setDraft] = useState<string | null>(null);
  const { message } = props;
  const branch = branches[message.id];

  if (draft !== null) {
    const send = (event: FormEvent) => {
      event.preventDefault();
      const text = draft.trim();
      if (!text || !ready) return;
      setDraft(null);
      edit(message, text);
    };
    const keys = (event: KeyboardEvent<HTMLTextAreaElement>) => {
      if (event.key === "Escape") setDraft(null);
      if (event.key === "Enter" && !event.shiftKey && !event.nativeEvent.isComposing) send(event);
    };
    return (
      <div className="user-editing" data-testid="user-message-editing" data-message-id={message.id}>
        <form className="edit-form" onSubmit={send}>
          <textarea aria-label="Your edited question" rows={3} autoFocus value={draft} onChange={(event) => setDraft(event.target.value)} onKeyDown={keys} />
          <div className="edit-actions">
            <button type="button" onClick={() => setDraft(null)}>
              Cancel
            </button>
            <button type="submit" className="primary" disabled={!ready}>
              Send
            </button>
          </div>
        </form>
      </div>
    );
  }
  // the handlers stay while a run goes on (CopilotKit hides a button without one) and wait for it
  return (
    <CopilotChatUserMessage
      {...props}
      className={branch ? "has-versions" : undefined}
      messageRenderer="question-text"
      onEditMessage={() => ready && setDraft(textOf(message))}
      branchIndex={branch?.index}
      numberOfBranches={branch?.ids.length}
      onSwitchToBranch={({ branchIndex }) => branch && switchTo(branch.ids[branchIndex])}
    />
  );
}

// The message slots expect the default component's type, sub-components included: the replacements
// carry the defaults' (`AssistantMessage.MarkdownRenderer`, ...), as the slot system assumes.
export const AssistantMessage = Object.assign(RagstreamAssistantMessage, CopilotChatAssistantMessage);
export const UserMessage = Object.assign(RagstreamUserMessage, CopilotChatUserMessage);
