// Citations: `[n]` in an answer becomes a link to source card n; the cards come from the agent's
// shared state (ragstream's `citations`), so they are exactly what the server holds for the thread.
import { CopilotChatAssistantMessage } from "@copilotkit/react-core/v2";
import { createContext, useContext, type ComponentProps, type ReactNode } from "react";

import { orderedCitations, whereInDocument, type Citation, type RagState } from "./ragstream";

interface CitationsValue {
  citations: Record<string, Citation>;
  active: string | null;
  open: (index: string) => void;
}

const CitationsContext = createContext<CitationsValue>({ citations: {}, active: null, open: () => {} });

export function CitationsProvider({ value, children }: { value: CitationsValue; children: ReactNode }) {
  return <CitationsContext.Provider value={value}>{children}</CitationsContext.Provider>;
}

const MARKER = /\[(\d+)\](?!\()/g;
const SOURCE_LINK = /^#source-(\d+)$/;

/** The answer with each `[n]` that names a known citation turned into a Markdown link to its card. */
export function linkCitations(text: string, citations: Record<string, Citation>): string {
  return text.replace(MARKER, (marker, index: string) => (index in citations ? `[\\[${index}\\]](#source-${index})` : marker));
}

function CiteLink({ href, children, ...props }: ComponentProps<"a">) {
  const { citations, open } = useContext(CitationsContext);
  const index = href?.match(SOURCE_LINK)?.[1];
  if (!index || !(index in citations)) {
    return (
      <a href={href} target="_blank" rel="noreferrer" {...props}>
        {children}
      </a>
    );
  }
  return (
    <a
      href={href}
      className="cite"
      data-cite={index}
      title={citations[index].title}
      onClick={(event) => {
        event.preventDefault();
        open(index);
      }}
    >
      [{index}]
    </a>
  );
}

const components = { a: CiteLink };

/** CopilotChat's Markdown renderer (Streamdown), with citation markers as links to their cards. */
export function CitedMarkdown({ content, ...props }: ComponentProps<typeof CopilotChatAssistantMessage.MarkdownRenderer>) {
  const { citations } = useContext(CitationsContext);
  if (!content) return null; // a message that only calls tools
  return (
    <div className="answer-text">
      <CopilotChatAssistantMessage.MarkdownRenderer
        {...props}
        content={linkCitations(content, citations)}
        components={components}
      />
    </div>
  );
}

/** The source cards of the thread, in citation order. */
export function Sources({ state }: { state: RagState }) {
  const { active } = useContext(CitationsContext);
  const cards = orderedCitations(state);
  return (
    <section id="sources" aria-labelledby="sources-title">
      <h2 id="sources-title">Sources</h2>
      {cards.length === 0 ? <p className="muted">Answers cite their sources here.</p> : null}
      {cards.map((citation) => {
        const index = String(citation.index);
        const where = whereInDocument(citation);
        const link = /^https?:\/\//.test(citation.uri);
        return (
          <article
            key={index}
            id={`source-${index}`}
            className={active === index ? "source is-active" : "source"}
            tabIndex={-1}
            data-index={index}
          >
            <h3>
              <span className="source-index">[{index}]</span> {citation.title}
            </h3>
            <p className="source-uri">
              {link ? (
                <a href={citation.uri} target="_blank" rel="noreferrer">
                  {citation.uri}
                </a>
              ) : (
                citation.uri
              )}
            </p>
            {where ? <p className="source-where">{where}</p> : null}
            <blockquote className="source-passage">{citation.passage}</blockquote>
          </article>
        );
      })}
    </section>
  );
}
