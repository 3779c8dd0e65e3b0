"""Document routes: list the knowledge base, upload files into it."""

from __future__ import annotations

from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from rag_tools.kb import SUPPORTED_SUFFIXES

from ..errors import ApiError
from ..services import Services
from ._common import caller, int_param, read_body, services_of

__all__ = ["list_documents", "upload_documents"]

MAX_FILES = 20


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
    """Ingest the files of a ``multipart/form-data`` body (field ``file``, repeatable)."""
    caller(request)
    services = services_of(request)
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
        outcomes = await _ingest_uploads(
            services, [f for f in form.getlist("file") if isinstance(f, UploadFile)]
        )
    finally:
        await form.close()  # spooled upload files
    if all(o["status"] == "error" for o in outcomes):
        raise ApiError(422, "no file could be ingested", details=outcomes)
    created = any(o["status"] in ("added", "updated") for o in outcomes)
    return JSONResponse({"outcomes": outcomes}, status_code=201 if created else 200)


async def _ingest_uploads(services: Services, files: list[UploadFile]) -> list[dict[str, Any]]:
    if not files:
        raise ApiError(422, "no file in the 'file' field", details=[{"loc": ["file"]}])
    outcomes: list[dict[str, Any]] = []
    for upload in files:
        name = (upload.filename or "").replace("\\", "/").rsplit("/", 1)[-1]
        if not name or "." + name.rsplit(".", 1)[-1].lower() not in SUPPORTED_SUFFIXES:
            outcomes.append({"source": name, "status": "error", "error": "unsupported file type"})
            continue
        outcome = await services.kb.ingest_bytes(await upload.read(), name=name)
        outcomes.append(outcome.model_dump(mode="json"))
    return outcomes
