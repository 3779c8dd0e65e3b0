// Adding documents: an upload form and one card per job. The server answers an upload at once with
// a job (202) and ingests in the background; the card polls `GET /documents/jobs/{id}` and shows
// the job's state, its progress and each file's outcome, with a Cancel button while it may still
// stop. The cards are the caller's latest jobs as the server lists them (`GET /documents/jobs`:
// uploads, and the scheduled syncs the caller owns), so they come back after a reload, in any
// browser (the server keeps a job for a day).
import { type Api, ApiError } from "./api";
import { h } from "./dom";
import type { IngestJob } from "./types";

const POLL_MS = 500;
/** After a failed read of a job, the next waits twice as long as the last, up to this. */
const RETRY_MAX_MS = 16_000;
const SHOWN_JOBS = 10;

const FILE_STATUS: Record<string, string> = {
  pending: "waiting",
  added: "added",
  updated: "updated",
  unchanged: "unchanged",
  deleted: "removed",
  cancelled: "cancelled",
  error: "not ingested",
};

function finished(job: IngestJob): boolean {
  return job.state === "done" || job.state === "failed" || job.state === "cancelled";
}

/**
 * Why a card stops following its job after a failed read, or null when the read may work if tried
 * again (no answer at all, 408, 429, a 5xx: a restart or a network blip). Asking again cannot
 * change a 404 (the server keeps a job for a day, then forgets it) or a 401/403 (the token changed).
 */
function lostReason(error: unknown): string | null {
  if (!(error instanceof ApiError)) return null;
  const { status, message } = error;
  if (status === 408 || status === 429 || status >= 500) return null;
  if (status === 404)
    return "The server no longer has this job (it keeps jobs for a day), so its outcome is unknown.";
  if (status === 401)
    return `This job can no longer be followed: ${message}. Reload the page with a valid token.`;
  return `This job can no longer be followed: ${message}.`;
}

/** How a card follows its job when the last read of it failed. */
interface FollowProblem {
  /** true: the card stopped following the job; false: it asks again, after a longer wait. */
  lost: boolean;
  message: string;
}

export class UploadsView {
  private jobs: IngestJob[] = [];
  private readonly cancelling = new Set<string>();
  private readonly problems = new Map<string, FollowProblem>();
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
    });
    void api.uploadFormats().then(
      (formats) => {
        if (formats.length) this.input.accept = formats.join(",");
      },
      () => undefined, // no list: the picker offers every file, and the server says what it refuses
    );
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

  /** The cards of the caller's latest jobs, from the server; unfinished ones are followed. */
  private async restore(): Promise<void> {
    let listed: IngestJob[];
    try {
      listed = (await this.api.jobs(SHOWN_JOBS)).jobs;
    } catch (error) {
      // the jobs live on the server: an empty list would say there are none
      const cause = error instanceof Error ? error.message : String(error);
      this.message = `Your recent uploads could not be listed (${cause}); reload the page to see them.`;
      this.render();
      return;
    }
    const known = new Set(this.jobs.map((j) => j.id));
    const restored = listed.filter((job) => !known.has(job.id));
    this.jobs = [...this.jobs, ...restored].slice(0, SHOWN_JOBS);
    this.render();
    for (const job of restored) {
      if (!finished(job)) void this.follow(job.id);
    }
  }

  private async submit(event: Event): Promise<void> {
    event.preventDefault();
    const files = Array.from(this.input.files ?? []);
    if (!files.length) {
      this.message = "Choose one or more files first.";
      this.render();
      this.input.focus();
      return;
    }
    this.button.disabled = true;
    this.message = null;
    try {
      const job = await this.api.upload(files);
      this.input.value = "";
      this.jobs = [job, ...this.jobs].slice(0, SHOWN_JOBS);
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

  /**
   * Poll a job until it is done or failed. A read that failed for a passing reason (a restart, a
   * network blip: the job lives on the server) is tried again, each time after a longer wait, and
   * the card says so; one that cannot work when asked again (404, 401, 403) ends the following and
   * the card says why.
   */
  private async follow(jobId: string): Promise<void> {
    let wait = POLL_MS;
    for (;;) {
      await new Promise((resolve) => setTimeout(resolve, wait));
      let job: IngestJob;
      try {
        job = await this.api.job(jobId);
      } catch (error) {
        const reason = lostReason(error);
        wait = reason === null ? Math.min(Math.max(wait * 2, 1000), RETRY_MAX_MS) : wait;
        const cause = error instanceof Error ? error.message : String(error);
        this.problems.set(
          jobId,
          reason === null
            ? { lost: false, message: `Could not check on this job (${cause}); trying again.` }
            : { lost: true, message: reason },
        );
        this.render();
        if (reason === null) continue;
        return;
      }
      wait = POLL_MS;
      this.problems.delete(jobId);
      this.jobs = this.jobs.map((j) => (j.id === jobId ? job : j));
      this.render();
      if (finished(job)) {
        this.onIngested();
        return;
      }
    }
  }

  /** Ask the server to stop a job; the card follows it to its end as before. */
  private async cancel(jobId: string): Promise<void> {
    this.cancelling.add(jobId);
    this.render();
    try {
      const job = await this.api.cancelJob(jobId);
      this.jobs = this.jobs.map((j) => (j.id === jobId ? job : j));
    } catch (error) {
      this.cancelling.delete(jobId);
      this.message = `The job could not be cancelled: ${error instanceof Error ? error.message : String(error)}`;
    }
    this.render();
  }

  private render(): void {
    const cards = this.jobs.map((job) =>
      jobCard(job, this.cancelling.has(job.id), this.problems.get(job.id), () => void this.cancel(job.id)),
    );
    if (this.message) cards.unshift(h("li", { class: "job job-error", role: "alert" }, this.message));
    this.list.replaceChildren(...cards);
  }
}

/**
 * How far a job got: files, and chunks once the job has counted some (before that "0/0 chunks" says
 * nothing). A job cancelled before it finished a file wrote nothing (it never leaves half a document).
 */
function failedFiles(job: IngestJob): number {
  return job.files.filter((file) => file.status === "error").length;
}

function progressText(job: IngestJob): string {
  const { filesDone, filesTotal, chunksDone, chunksTotal } = job.progress;
  if (job.state === "cancelled" && filesDone === 0) return "nothing was written";
  const chunks = chunksTotal > 0 ? ` · ${chunksDone}/${chunksTotal} chunks` : "";
  const failed = failedFiles(job);
  return `${filesDone}/${filesTotal} files${chunks}${failed ? ` · ${failed} failed` : ""}`;
}

/** What a finished job did: every file, some of them, or none (each failed file says why below). */
function doneLabel(job: IngestJob): string {
  const failed = failedFiles(job);
  if (failed === 0) return "Ingested";
  return failed === job.files.length ? "Nothing ingested" : "Partly ingested";
}

function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? "" : "s"}`;
}

/** A job's card; `problem`: the last read of the job failed (a lost job shows as last read). */
function jobCard(
  job: IngestJob,
  cancelling: boolean,
  problem: FollowProblem | undefined,
  onCancel: () => void,
): HTMLElement {
  const { chunksDone, chunksTotal } = job.progress;
  const lost = problem?.lost === true;
  const state = lost
    ? "No longer followed"
    : {
        queued: "Waiting to be ingested",
        running: cancelling ? "Cancelling" : "Ingesting",
        done: doneLabel(job),
        failed: "Ingestion failed",
        cancelled: "Cancelled",
      }[job.state];
  const active = !finished(job) && !lost;
  return h(
    "li",
    {
      class: `job job-${job.state}${lost ? " job-lost" : ""}`,
      "data-job": job.id,
      "data-state": job.state,
      "data-kind": job.kind,
    },
    job.kind === "sync" ? h("p", { class: "job-source" }, `Sync of ${job.source ?? "a source"}`) : null,
    h(
      "p",
      { class: "job-state" },
      `${state} · ${progressText(job)}`,
      active
        ? h(
            "button",
            { type: "button", class: "job-cancel", disabled: cancelling, onclick: onCancel },
            "Cancel",
          )
        : null,
    ),
    active
      ? h("progress", { max: Math.max(chunksTotal, 1), value: chunksDone, "aria-label": "Progress" })
      : null,
    job.error ? h("p", { class: "job-message" }, job.error) : null,
    problem ? h("p", { class: "job-message job-follow" }, problem.message) : null,
    h(
      "ul",
      { class: "job-files" },
      job.files.map((file) =>
        h(
          "li",
          { class: `job-file file-${file.status}`, "data-status": file.status },
          `${file.name}: ${FILE_STATUS[file.status] ?? file.status}`,
          file.chunks ? ` (${plural(file.chunks, "chunk")})` : null,
          file.error ? ` — ${file.error}` : null,
        ),
      ),
    ),
  );
}
