// The document filter: which documents answers may use. It is ragstream's client-owned
// `document_filter` in the shared state; the page writes it with `agent.setState` and CopilotKit
// sends it with the next run, where ragstream takes it (and only it) from the client's state.
import { useEffect, useState } from "react";

import { answerError } from "./ragstream";

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
  const [error, setError] = useState<string | null>(null);
  const [draft, setDraft] = useState("");

  useEffect(() => {
    fetch("/api/documents?page_size=500")
      .then(async (response) => {
        if (!response.ok) throw await answerError(response);
        return response.json() as Promise<{ documents: DocumentSummary[] }>;
      })
      .then((listing) => setDocuments(listing.documents))
      .catch((reason: unknown) => setError(`Could not list the documents: ${reason instanceof Error ? reason.message : String(reason)}`));
  }, []);

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
