"""Document routes: list, read, regroup and delete knowledge-base documents; upload files as
ingestion jobs.

An upload is stored with its job and answered ``202`` at once; any worker or host runs the job and
reports on it (``ragstream.jobs``). Changing the knowledge base is for editors (``access.check_editor``),
and a group editor changes only its groups' documents (``access.check_document_editor``). Every
read goes through the caller's view of the knowledge base (``access.reader_of``): a document the
caller may not read is a 404, exactly as a missing one.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from urllib.parse import quote

import orjson
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rag_tools.arguments import NAME_CHARS
from rag_tools.extras import MissingExtra
from rag_tools.kb import (
    Document,
    KnowledgeBase,
    UnsupportedFormatError,
    detect_format,
    document_id_for,
    upload_origin,
)
from rag_tools.kb.access import InvalidGroups, check_groups
from rag_tools.kb.page_images import PageNotFound, page_image

from ..access import (
    DocumentNotFound,
    JobFinished,
    check_document_change,
    check_editor,
    check_job_owner,
)
from ..auth import groups_of
from ..errors import ApiError
from ..jobs import FINISHED, IngestJob
from ..observe import metrics
from ..services import Services
from ._common import caller, int_param, path_id, read_body, read_json_body, reader, services_of

__all__ = [
    "cancel_job",
    "delete_document",
    "get_document",
    "get_job",
    "get_page_image",
    "list_documents",
    "list_jobs",
    "patch_document",
    "upload_documents",
]

MAX_FILES = 20
PATCH_BODY_LIMIT = 16 * 1024

#: Original files a browser may show in place; every other format is offered as a download, so an
#: uploaded HTML page never runs as a page of this origin.
_INLINE = {"application/pdf", "text/plain"}


def _editor(request: Request) -> tuple[str, Services]:
    principal = caller(request)
    services = services_of(request)
    config = services.config
    check_editor(
        principal,
        groups_of(request),
        editors=config.editors,
        editor_groups=config.editor_groups,
        sign_in_required=config.sign_in_required,
    )
    return principal, services


def readable_kb(request: Request) -> KnowledgeBase:
    """The knowledge base as the caller may read it (``access.reader_of``)."""
    return services_of(request).kb.restricted(reader(request))


async def _check_change(
    request: Request,
    principal: str,
    services: Services,
    document_id: str,
    *,
    new: Sequence[str] | None,
    must_exist: bool,
) -> Document | None:
    """``access.check_document_change`` for the caller; the document as it is now (``None``: no
    such document yet)."""
    config = services.config
    return await check_document_change(
        services.kb,
        principal,
        groups_of(request),
        document_id,
        new=new,
        must_exist=must_exist,
        editors=config.editors,
        editor_groups=config.editor_groups,
        sign_in_required=config.sign_in_required,
    )


def _form_groups(values: list[str]) -> tuple[str, ...] | None:
    """The upload's ``groups`` field: absent keeps groups (``None``); each value is a name or a
    comma-separated list; one empty value means everyone."""
    if not values:
        return None
    names = [name.strip() for value in values for name in value.split(",")]
    return _checked_groups([name for name in names if name])


def _checked_groups(names: list[str]) -> tuple[str, ...]:
    """``check_groups``, answered as a 422 on the request's ``groups`` field."""
    try:
        return check_groups(names)
    except InvalidGroups as exc:
        raise ApiError(422, str(exc), code="invalid_groups", details=[{"loc": ["groups"]}]) from None


def _supported(name: str) -> bool:
    """Whether the job can read a file of this name (the ingestion's own rule: ``.md`` alone is not)."""
    try:
        detect_format(name)
    except UnsupportedFormatError:
        return False
    return True


async def list_documents(request: Request) -> Response:
    """A page of the caller's documents by title; ``q`` keeps those whose title or file name has it."""
    page = int_param(request, "page", 1, low=1, high=10**6)
    page_size = int_param(request, "page_size", 50, low=1, high=500)
    query = request.query_params.get("q", "")
    if len(query) > NAME_CHARS:
        raise ApiError(
            422, f"q is {len(query)} characters long; at most {NAME_CHARS}", details=[{"loc": ["query", "q"]}]
        )
    listing = await readable_kb(request).list_documents(page=page, page_size=page_size, query=query or None)
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
    """Queue the files of a ``multipart/form-data`` body (field ``file``, repeatable) for ingestion.

    The optional field ``groups`` (``hr,finance``, or repeated) makes the files readable by those
    groups only; empty, by everyone; absent, a file replacing a document keeps its groups.
    """
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
        group_values = form.getlist("groups")
        if any(not isinstance(v, str) for v in group_values):
            raise ApiError(
                422,
                "groups must be a text field, not a file",
                code="invalid_groups",
                details=[{"loc": ["groups"]}],
            )
        groups = _form_groups([v for v in group_values if isinstance(v, str)])
        names = [(f.filename or "").replace("\\", "/").rsplit("/", 1)[-1] for f in files]
        found: dict[str, list[str] | None] = {}
        for name in dict.fromkeys(n for n in names if n):  # what the job will create or replace
            try:
                current = await _check_change(
                    request,
                    principal,
                    services,
                    document_id_for(upload_origin(name)),
                    new=groups,
                    must_exist=False,
                )
                found[name] = None if current is None else list(current.groups)
            except DocumentNotFound:  # a document the caller may not read holds the name: no id given
                raise ApiError(
                    409,
                    f"the name {name!r} is taken by a document you may not change; upload it under another name",
                    details=[{"loc": ["file"], "name": name}],
                ) from None
        job = IngestJob.new(uuid.uuid4().hex, principal, names)
        job.groups = None if groups is None else list(groups)
        job.found = found  # the job writes each file only while its document is still what was checked here
        uploads: dict[int, bytes] = {}
        for index, (upload, name) in enumerate(zip(files, names, strict=True)):
            if not _supported(name):
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
    await services.quotas.admit_upload(principal, sum(len(data) for data in uploads.values()))
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
    document_id = path_id(request, "document_id", "document id")
    kb = readable_kb(request)
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


_MARK_CHARS = 2000


async def get_page_image(request: Request) -> Response:
    """Page ``n`` of a PDF or image document as a PNG, the passage ``?mark=`` marked on it (a
    citation card's picture of where its passage is); ``X-Passage-Region`` is the marked box."""
    document_id = path_id(request, "document_id", "document id")
    page = int_param(request, "page", 1, low=1, high=100_000)
    mark = request.query_params.get("mark", "")[:_MARK_CHARS]
    original = await readable_kb(request).get_document_file(document_id)
    if original is None:
        raise ApiError(404, f"document {document_id!r} not found, or kept without its original file")
    try:
        shown = await asyncio.to_thread(page_image, original, page, mark or None)
    except PageNotFound as exc:
        raise ApiError(404, str(exc)) from None
    except MissingExtra as exc:  # this server cannot draw pages
        raise ApiError(503, str(exc)) from None
    except ValueError as exc:  # an unreadable file
        raise ApiError(503 if "ragstream[ocr]" in str(exc) else 422, str(exc)) from None
    headers = {"Cache-Control": "private, max-age=300", "X-Content-Type-Options": "nosniff"}
    if shown.region is not None:
        headers["X-Passage-Region"] = ",".join(map(str, shown.region))
    return Response(shown.png, media_type="image/png", headers=headers)


async def delete_document(request: Request) -> Response:
    """Remove a document from the knowledge base: chunks, original file and listing."""
    principal, services = _editor(request)
    document_id = path_id(request, "document_id", "document id")
    # the write checks the document is still the one checked: a change of its groups meanwhile
    # (another editor) would otherwise let this editor delete what it may no longer change
    checked = await _check_change(request, principal, services, document_id, new=None, must_exist=True)
    if not await services.kb.delete_document(document_id, expected=checked):
        raise DocumentNotFound(document_id)  # deleted meanwhile
    return Response(status_code=204)


async def patch_document(request: Request) -> Response:
    """Change who may read a document: ``{"groups": ["hr", ...]}`` (``[]``: everyone)."""
    principal, services = _editor(request)
    document_id = path_id(request, "document_id", "document id")
    try:
        body = orjson.loads(await read_json_body(request))
    except orjson.JSONDecodeError as exc:
        raise ApiError(422, f"the body is not JSON: {exc}") from None
    if not isinstance(body, dict) or set(body) != {"groups"} or not isinstance(body["groups"], list):
        raise ApiError(
            422, 'the body must be {"groups": [...]}, a list of group names', details=[{"loc": ["groups"]}]
        )
    groups = _checked_groups(body["groups"])
    checked = await _check_change(request, principal, services, document_id, new=groups, must_exist=True)
    document = await services.kb.set_document_groups(document_id, groups, expected=checked)
    if document is None:  # deleted meanwhile
        raise DocumentNotFound(document_id)
    return JSONResponse(document.model_dump(mode="json", exclude={"content"}))
