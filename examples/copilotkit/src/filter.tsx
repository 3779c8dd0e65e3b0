// The document filter: which documents answers may use. It is ragstream's client-owned
// `document_filter` in the shared state; the page writes it with `agent.setState` and CopilotKit
// sends it with the next run, where ragstream takes it (and only it) from the client's state.
import { useEffect, useState } from "react";

import { answerError } from "./ragstream";

const PAGE_SIZE = 50;

interface DocumentSummary {
  document_id: string;
  title: string;
}

export function DocumentFilter({
  names,
  confirmed,
  onChange,
}: {
  names: string[];
  /** The filter the last answer used, to say when a change applies. */
  confirmed: string[];
  onChange: (names: string[]) => void;
}) {
  const [documents, setDocuments] = useState<DocumentSummary[] | null>(null);
  const [total, setTotal] = useState(0);
  const [error, setError] = useState<string | null>(null);
  const [draft, setDraft] = useState("");
  const [query, setQuery] = useState("");

  // The list is ragstream's GET /documents?q=: the documents whose title or file name holds what is
  // typed (a knowledge base of thousands is searched, not listed), fetched 200 ms after the last key;
  // an answer to an older query is dropped.
  useEffect(() => {
    let current = true;
    const timer = setTimeout(() => {
      const search = new URLSearchParams({ page_size: String(PAGE_SIZE) });
      if (query.trim()) search.set("q", query.trim());
      fetch(`/api/documents?${search}`)
        .then(async (response) => {
          if (!response.ok) throw await answerError(response);
          return response.json() as Promise<{ documents: DocumentSummary[]; total: number }>;
        })
        .then((listing) => {
          if (!current) return;
          setDocuments(listing.documents);
          setTotal(listing.total);
          setError(null);
        })
        .catch((reason: unknown) => {
          if (current) setError(`Could not list the documents: ${reason instanceof Error ? reason.message : String(reason)}`);
        });
    }, query ? 200 : 0);
    return () => {
      current = false;
      clearTimeout(timer);
    };
  }, [query]);

  const toggle = (name: string, on: boolean) =>
    onChange(on ? [...names.filter((n) => n !== name), name] : names.filter((n) => n !== name));
  const pending = JSON.stringify(names) !== JSON.stringify(confirmed);

  return (
    <section id="filter" aria-labelledby="filter-title">
      <h2 id="filter-title">Documents</h2>
      <p className="filter-summary">
        {names.length ? `Answers use only: ${names.join(", ")}.` : "Answers use all documents."}
        {names.length ? (
          <button type="button" className="link" onClick={() => onChange([])}>
            Clear
          </button>
        ) : null}
        {pending ? <span className="filter-pending"> Applies from your next question.</span> : null}
      </p>
      <form
        className="filter-add"
        onSubmit={(event) => {
          event.preventDefault();
          const name = draft.trim();
          if (name && !names.includes(name)) onChange([...names, name]);
          setDraft("");
        }}
      >
        <input
          id="filter-name"
          value={draft}
          onChange={(event) => setDraft(event.target.value)}
          placeholder="Add a document name"
          aria-label="Add a document name to the filter"
        />
        <button type="submit">Add</button>
      </form>
      {names.length ? (
        <ul className="chips">
          {names.map((name) => (
            <li key={name} className="chip">
              {name}
              <button type="button" aria-label={`Remove ${name}`} onClick={() => toggle(name, false)}>
                ×
              </button>
            </li>
          ))}
        </ul>
      ) : null}
      {error ? <p className="error">{error}</p> : null}
      <input
        id="filter-search"
        type="search"
        value={query}
        onChange={(event) => setQuery(event.target.value)}
        placeholder="Find a document"
        aria-label="Find a document by title or file name"
      />
      {documents ? (
        <p className="doc-count">
          {documents.length < total ? `${documents.length} of ${total} documents` : `${total} document${total === 1 ? "" : "s"}`}
        </p>
      ) : null}
      <ul className="doc-list">
        {(documents ?? []).map((doc) => (
          <li key={doc.document_id}>
            <label>
              <input type="checkbox" checked={names.includes(doc.title)} onChange={(e) => toggle(doc.title, e.target.checked)} />
              {doc.title}
            </label>
          </li>
        ))}
      </ul>
    </section>
  );
}
