// Adding documents: an upload form and one card per ingestion job. The server answers an upload at
// once with a job (202) and ingests in the background; the card polls `GET /documents/jobs/{id}`
// and shows the job's state, its progress and each file's outcome. The ids of the latest jobs are
// kept in localStorage, so the cards come back after a reload (the server keeps a job for a day).
import { type Api, ApiError } from "./api";
import { h } from "./dom";
import type { IngestJob } from "./types";

const POLL_MS = 500;
const STORED_JOBS = "ragstream.uploads";
const KEPT_JOBS = 10;

const FILE_STATUS: Record<string, string> = {
  pending: "waiting",
  added: "added",
  updated: "updated",
  unchanged: "unchanged",
  error: "not ingested",
};

export class UploadsView {
  private jobs: IngestJob[] = [];
  private message: string | null = null;
  private readonly list: HTMLElement;
  private readonly input: HTMLInputElement;
  private readonly button: HTMLButtonElement;

  /** `onIngested()` runs when a job finishes, to refresh the document list. */
  constructor(
    root: HTMLElement,
    private readonly api: Api,
    private readonly onIngested: () => void,
  ) {
    this.input = h("input", {
      id: "upload-files",
      type: "file",
      multiple: true,
      accept: ".md,.markdown,.txt,.html,.htm,.pdf",
    });
    this.button = h("button", { type: "submit" }, "Upload");
    this.list = h("ul", { id: "jobs", class: "jobs", "aria-live": "polite", "aria-label": "Uploads" });
    const form = h(
      "form",
      { id: "upload", class: "upload", onsubmit: (event: Event) => void this.submit(event) },
      h("label", { for: "upload-files" }, "Add files to the knowledge base"),
      h("div", { class: "row" }, this.input, this.button),
    );
    root.replaceChildren(form, this.list);
    void this.restore();
  }

  /** The cards of the jobs this browser started before a reload; unfinished ones are followed. */
  private async restore(): Promise<void> {
    const ids = storedJobIds();
    const found = await Promise.all(ids.map((id) => this.api.job(id).catch(() => null)));
    const known = new Set(this.jobs.map((j) => j.id));
    const restored = found.filter((job): job is IngestJob => job !== null && !known.has(job.id));
    this.jobs = [...this.jobs, ...restored];
    storeJobIds(this.jobs.map((j) => j.id));
    this.render();
    for (const job of restored) {
      if (job.state !== "done" && job.state !== "failed") void this.follow(job.id);
    }
  }

  private async submit(event: Event): Promise<void> {
    event.preventDefault();
    const files = Array.from(this.input.files ?? []);
    if (!files.length) return;
    this.button.disabled = true;
    this.message = null;
    try {
      const job = await this.api.upload(files);
      this.input.value = "";
      this.jobs.unshift(job);
      storeJobIds(this.jobs.map((j) => j.id));
      void this.follow(job.id);
    } catch (error) {
      this.message =
        error instanceof ApiError && error.status === 403
          ? `You may not add documents: ${error.message}`
          : `The upload failed: ${error instanceof Error ? error.message : String(error)}`;
    } finally {
      this.button.disabled = false;
      this.render();
    }
  }

  /** Poll a job until it is done or failed. */
  private async follow(jobId: string): Promise<void> {
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, POLL_MS));
      let job: IngestJob;
      try {
        job = await this.api.job(jobId);
      } catch {
        continue; // a restart or a network blip: the job lives on the server, ask again
      }
      this.jobs = this.jobs.map((j) => (j.id === jobId ? job : j));
      this.render();
      if (job.state === "done" || job.state === "failed") {
        this.onIngested();
        return;
      }
    }
  }

  private render(): void {
    const cards = this.jobs.map((job) => jobCard(job));
    if (this.message) cards.unshift(h("li", { class: "job job-error", role: "alert" }, this.message));
    this.list.replaceChildren(...cards);
  }
}

function storedJobIds(): string[] {
  try {
    const ids: unknown = JSON.parse(localStorage.getItem(STORED_JOBS) ?? "[]");
    return Array.isArray(ids) ? ids.filter((id): id is string => typeof id === "string") : [];
  } catch {
    return [];
  }
}

function storeJobIds(ids: string[]): void {
  try {
    localStorage.setItem(STORED_JOBS, JSON.stringify(ids.slice(0, KEPT_JOBS)));
  } catch {
    // storage may be unavailable (private mode, quota): the cards then last until a reload
  }
}

function jobCard(job: IngestJob): HTMLElement {
  const { filesDone, filesTotal, chunksDone, chunksTotal } = job.progress;
  const state = {
    queued: "Waiting to be ingested",
    running: "Ingesting",
    done: "Ingested",
    failed: "Ingestion failed",
  }[job.state];
  return h(
    "li",
    { class: `job job-${job.state}`, "data-job": job.id, "data-state": job.state },
    h(
      "p",
      { class: "job-state" },
      `${state} · ${filesDone}/${filesTotal} files · ${chunksDone}/${chunksTotal} chunks`,
    ),
    job.state === "running" || job.state === "queued"
      ? h("progress", { max: Math.max(chunksTotal, 1), value: chunksDone, "aria-label": "Progress" })
      : null,
    job.error ? h("p", { class: "job-message" }, job.error) : null,
    h(
      "ul",
      { class: "job-files" },
      job.files.map((file) =>
        h(
          "li",
          { class: `job-file file-${file.status}`, "data-status": file.status },
          `${file.name}: ${FILE_STATUS[file.status] ?? file.status}`,
          file.chunks ? ` (${file.chunks} chunks)` : null,
          file.error ? ` — ${file.error}` : null,
        ),
      ),
    ),
  );
}
