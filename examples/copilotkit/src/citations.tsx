// Citations: `[n]` in an answer is a link to source card n. The cards come from the agent's shared
// state (ragstream's `citations`), which carries the most recently cited cards only; the card of an
// older answer's `[n]` is read on demand from ragstream (`GET /threads/{id}/state/citations/{n}`,
// through this example's server) and shown under "From earlier answers".
import { CopilotChatAssistantMessage } from "@copilotkit/react-core/v2";
import { createContext, useCallback, useContext, useEffect, useMemo, useState, type ComponentProps, type ReactNode } from "react";

import { documentLink, whereInDocument, type Citation } from "./ragstream";

interface CitationsValue {
  /** The cards in the shared state, by index. */
  citations: Record<string, Citation>;
  /** Cards read on demand for markers outside the shared state, by index. */
  earlier: Record<string, Citation>;
  active: string | null;
  open: (index: string) => void;
}

const CitationsContext = createContext<CitationsValue>({ citations: {}, earlier: {}, active: null, open: () => {} });

/** Citation cards of one thread: the shared state's, and older ones read when a marker asks. */
export function CitationsProvider({
  threadId,
  citations,
  onError,
  version = 0,
  children,
}: {
  threadId: string;
  citations: Record<string, Citation>;
  onError: (message: string) => void;
  /** Changes when another branch is shown: citation numbers are a branch's, so read cards go. */
  version?: number;
  children: ReactNode;
}) {
  const [fetched, setFetched] = useState<Record<string, Citation>>({});
  const [active, setActive] = useState<string | null>(null);
  useEffect(() => setFetched({}), [version]);

  const focus = useCallback((index: string) => {
    setActive(index);
    // after React rendered the card
    requestAnimationFrame(() => {
      const card = document.getElementById(`source-${index}`);
      card?.scrollIntoView({ block: "nearest", behavior: "smooth" });
      card?.focus({ preventScroll: true });
    });
  }, []);

  const open = useCallback(
    (index: string) => {
      if (index in citations || index in fetched) return focus(index);
      fetch(`/api/threads/${encodeURIComponent(threadId)}/state/citations/${encodeURIComponent(index)}`)
        .then(async (response) => {
          if (!response.ok) throw new Error(`source [${index}] is not available (${response.status})`);
          const { value } = (await response.json()) as { value: Citation };
          setFetched((current) => ({ ...current, [index]: value }));
          focus(index);
        })
        .catch((error: unknown) => onError(error instanceof Error ? error.message : String(error)));
    },
    [citations, fetched, focus, onError, threadId],
  );

  const earlier = useMemo(
    () => Object.fromEntries(Object.entries(fetched).filter(([index]) => !(index in citations))),
    [fetched, citations],
  );
  const value = useMemo(() => ({ citations, earlier, active, open }), [citations, earlier, active, open]);
  return <CitationsContext.Provider value={value}>{children}</CitationsContext.Provider>;
}

const MARKER = /\[(\d+)\](?!\()/g;
const SOURCE_LINK = /^#source-(\d+)$/;

/** The answer with each `[n]` citation marker turned into a Markdown link to card n. */
export function linkCitations(text: string): string {
  return text.replace(MARKER, (_marker, index: string) => `[\\[${index}\\]](#source-${index})`);
}

/** A link in an answer: a citation marker opens its card; any other link opens in a new tab. The
 * Markdown renderer also passes its syntax-tree `node`, which is no attribute of a link. */
function CiteLink({ href, children, node: _node, ...props }: ComponentProps<"a"> & { node?: unknown }) {
  const { citations, earlier, open } = useContext(CitationsContext);
  const index = href?.match(SOURCE_LINK)?.[1];
  if (!index) {
    return (
      <a href={href} target="_blank" rel="noreferrer" {...props}>
        {children}
      </a>
    );
  }
  const known = citations[index] ?? earlier[index];
  return (
    <a
      href={href}
      className="cite"
      data-cite={index}
      title={known ? known.title : `Source ${index}`}
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
  if (!content) return null; // a message that only calls tools
  return (
    <div className="answer-text">
      <CopilotChatAssistantMessage.MarkdownRenderer {...props} content={linkCitations(content)} components={components} />
    </div>
  );
}

function Card({ citation, active }: { citation: Citation; active: boolean }) {
  const index = String(citation.index);
  const where = whereInDocument(citation);
  const link = /^https?:\/\//.test(citation.uri);
  return (
    <article id={`source-${index}`} className={active ? "source is-active" : "source"} tabIndex={-1} data-index={index}>
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
      <p className="source-open">
        <a
          href={documentLink(citation)}
          target="_blank"
          rel="noopener"
          aria-label={`Open ${citation.title}${citation.page !== null ? ` at page ${citation.page}` : ""}`}
        >
          {citation.page !== null ? `Open at page ${citation.page}` : "Open"}
        </a>
      </p>
      <blockquote className="source-passage">{citation.passage}</blockquote>
    </article>
  );
}

function byIndex(cards: Record<string, Citation>): Citation[] {
  return Object.values(cards).sort((a, b) => a.index - b.index);
}

/** The source cards: the shared state's, then any read for older answers. */
export function Sources() {
  const { citations, earlier, active } = useContext(CitationsContext);
  const recent = byIndex(citations);
  const older = byIndex(earlier);
  return (
    <>
      <section id="sources" aria-labelledby="sources-title">
        <h2 id="sources-title">Sources</h2>
        {recent.length === 0 ? <p className="muted">Answers cite their sources here.</p> : null}
        {recent.map((citation) => (
          <Card key={citation.index} citation={citation} active={active === String(citation.index)} />
        ))}
      </section>
      {older.length ? (
        <section id="earlier-sources" aria-labelledby="earlier-sources-title">
          <h2 id="earlier-sources-title">From earlier answers</h2>
          {older.map((citation) => (
            <Card key={citation.index} citation={citation} active={active === String(citation.index)} />
          ))}
        </section>
      ) : null}
    </>
  );
}
