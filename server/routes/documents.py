"""Document routes: list, read and delete knowledge-base documents; upload files as ingestion jobs.

An upload is stored with its job and answered ``202`` at once; any worker or host runs the job and
reports on it (``server.jobs``). Changing the knowledge base is for editors (``access.check_editor``).
"""

from __future__ import annotations

import uuid
from urllib.parse import quote

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rag_tools.kb import SUPPORTED_SUFFIXES

from ..access import JobFinished, check_editor, check_job_owner
from ..errors import ApiError
from ..jobs import FINISHED, IngestJob
from ..observe import metrics
from ..services import Services
from ._common import caller, int_param, path_id, read_body, services_of

__all__ = [
    "cancel_job",
    "delete_document",
    "get_document",
    "get_job",
    "list_documents",
    "list_jobs",
    "upload_documents",
]

MAX_FILES = 20

#: Original files a browser may show in place; every other format is offered as a download, so an
#: uploaded HTML page never runs as a page of this origin.
_INLINE = {"application/pdf", "text/plain"}


def _editor(request: Request) -> tuple[str, Services]:
    principal = caller(request)
    services = services_of(request)
    check_editor(principal, services.config.editors, tokens_configured=bool(services.config.tokens))
    return principal, services


async def list_documents(request: Request) -> Response:
    caller(request)
    page = int_param(request, "page", 1, low=1, high=10**6)
    page_size = int_param(request, "page_size", 50, low=1, high=500)
    listing = await services_of(request).kb.list_documents(page=page, page_size=page_size)
    return JSONResponse(
        {
            "documents": [d.model_dump(mode="json", exclude={"content"}) for d in listing.documents],
            "page": listing.page,
            "pageSize": listing.page_size,
            "pages": listing.pages,
            "total": listing.total,
        }
    )


async def upload_documents(request: Request) -> Response:
    """Queue the files of a ``multipart/form-data`` body (field ``file``, repeatable) for ingestion."""
    principal, services = _editor(request)
    if not request.headers.get("content-type", "").lower().startswith("multipart/form-data"):
        raise ApiError(415, "upload files as multipart/form-data in a field named 'file'")
    body = await read_body(request)

    async def replay() -> dict[str, object]:
        return {"type": "http.request", "body": body, "more_body": False}

    try:
        form = await Request(request.scope, replay).form(max_files=MAX_FILES, max_fields=10)
    except Exception as exc:  # malformed multipart: python-multipart raises several types
        raise ApiError(400, f"the multipart body could not be parsed: {exc}") from None
    try:
        files = [f for f in form.getlist("file") if isinstance(f, UploadFile)]
        if not files:
            raise ApiError(422, "no file in the 'file' field", details=[{"loc": ["file"]}])
        names = [(f.filename or "").replace("\\", "/").rsplit("/", 1)[-1] for f in files]
        job = IngestJob.new(uuid.uuid4().hex, principal, names)
        uploads: dict[int, bytes] = {}
        for index, (upload, name) in enumerate(zip(files, names, strict=True)):
            if not name or "." + name.rsplit(".", 1)[-1].lower() not in SUPPORTED_SUFFIXES:
                job.files[index].status = "error"
                job.files[index].error = "unsupported file type"
                job.progress.files_done += 1
            else:
                uploads[index] = await upload.read()
    finally:
        await form.close()  # spooled upload files
    if not uploads:
        details = [f.model_dump(mode="json", by_alias=True) for f in job.files]
        raise ApiError(422, "no file could be ingested", details=details)
    await services.jobs.submit(job, uploads)
    metrics.INGEST_JOBS.labels("queued").inc()
    return JSONResponse(
        {"jobId": job.id, "job": job.public()},
        status_code=202,
        headers={"Location": f"/documents/jobs/{job.id}"},
    )


async def get_job(request: Request) -> Response:
    """An ingestion job's state, progress and per-file outcomes (the owner's jobs only)."""
    principal = caller(request)
    job_id = path_id(request, "job_id", "job id")
    job = await services_of(request).jobs.get(job_id)
    check_job_owner(job_id, job.owner if job else None, principal)
    assert job is not None
    return JSONResponse(job.public(), headers={"Cache-Control": "no-store"})


async def list_jobs(request: Request) -> Response:
    """The caller's jobs (uploads and the syncs they own), newest first: ``?limit=`` (1-100, 20) at a
    time; ``next`` is the ``cursor`` of the following page, ``null`` on the last."""
    principal = caller(request)
    limit = int_param(request, "limit", 20, low=1, high=100)
    page = await services_of(request).jobs.list(
        principal, limit=limit, cursor=request.query_params.get("cursor") or None
    )
    return JSONResponse(
        {"jobs": [job.public() for job in page.jobs], "next": page.next},
        headers={"Cache-Control": "no-store"},
    )


async def cancel_job(request: Request) -> Response:
    """Cancel one of the caller's jobs: ``200`` with the record when it ended at once (it was
    queued), ``202`` while its worker stops it between two files; ``409`` when it had ended."""
    principal = caller(request)
    job_id = path_id(request, "job_id", "job id")
    jobs = services_of(request).jobs
    job = await jobs.get(job_id)
    check_job_owner(job_id, job.owner if job else None, principal)
    assert job is not None
    if job.state in FINISHED:
        raise JobFinished(job_id, job.state)
    job = await jobs.cancel(job_id) or job
    return JSONResponse(job.public(), status_code=200 if job.state in FINISHED else 202)


def _wants_file(request: Request) -> bool:
    fmt = request.query_params.get("format", "json")
    if fmt not in ("json", "file"):
        raise ApiError(422, "format must be 'json' or 'file'", details=[{"loc": ["query", "format"]}])
    accept = request.headers.get("accept", "")
    return fmt == "file" or ("format" not in request.query_params and "application/pdf" in accept)


async def get_document(request: Request) -> Response:
    """The document as JSON (metadata and text), or its original file (``?format=file``)."""
    caller(request)
    document_id = path_id(request, "document_id", "document id")
    kb = services_of(request).kb
    if _wants_file(request):
        original = await kb.get_document_file(document_id)
        if original is None:
            raise ApiError(404, f"document {document_id!r} not found, or kept without its original file")
        disposition = "inline" if original.media_type in _INLINE else "attachment"
        return Response(
            original.data,
            media_type=original.media_type,
            headers={
                "Content-Disposition": f"{disposition}; filename*=UTF-8''{quote(original.filename)}",
                "X-Content-Type-Options": "nosniff",
                "Cache-Control": "private, no-cache",
            },
        )
    document = await kb.get_document_by_id(document_id, with_content=True)
    if document is None:
        raise ApiError(404, f"document {document_id!r} not found")
    return JSONResponse(document.model_dump(mode="json"))


async def delete_document(request: Request) -> Response:
    """Remove a document from the knowledge base: chunks, original file and listing."""
    _, services = _editor(request)
    document_id = path_id(request, "document_id", "document id")
    if await services.kb.get_document_by_id(document_id) is None:
        raise ApiError(404, f"document {document_id!r} not found")
    await services.kb.delete_document(document_id)
    return Response(status_code=204)
