"""An S3 prefix as a sync source, through boto3 and the standard AWS variables.

The variables are the ones LanceDB reads for the knowledge base itself, with its meaning:
``AWS_ENDPOINT_URL`` (an S3-compatible store), ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``
(else boto3's usual chain: profile, instance role), ``AWS_REGION`` and ``AWS_ALLOW_HTTP``: a plain
http endpoint is refused without it, as LanceDB refuses it.
"""

from __future__ import annotations

import os
from typing import Any

from ..extras import extra_imports
from .sources import SyncFile, SyncSource, SyncSourceError, is_ingestible

with extra_imports("s3"):
    import boto3
    from botocore.config import Config
    from botocore.exceptions import BotoCoreError, ClientError

__all__ = ["S3Prefix", "s3_client"]

_TRUE = {"1", "true", "yes", "on"}


def s3_client() -> Any:
    """A boto3 S3 client configured from the standard AWS variables."""
    endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT") or None
    if (
        endpoint
        and endpoint.startswith("http://")
        and os.environ.get("AWS_ALLOW_HTTP", "").lower() not in _TRUE
    ):
        raise SyncSourceError(
            f"the object-store endpoint is plain http ({endpoint}): set AWS_ALLOW_HTTP=true"
        )
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or None
    config = Config(connect_timeout=5, read_timeout=60, retries={"max_attempts": 3, "mode": "standard"})
    return boto3.client("s3", endpoint_url=endpoint, region_name=region, config=config)


def _reason(error: Exception) -> str:
    if isinstance(error, ClientError):
        code = error.response.get("Error", {}).get("Code", "an error")
        return f"the object store answered {code}"
    return str(error)


class S3Prefix(SyncSource):
    """Every object under ``s3://bucket/prefix/`` whose key is an ingestible file name."""

    def __init__(self, uri: str) -> None:
        bucket, _, prefix = uri.removeprefix("s3://").partition("/")
        if not bucket:
            raise SyncSourceError(f"cannot sync {uri!r}: name a bucket, as in s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.root = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = s3_client()
        return self._client

    def list(self) -> list[SyncFile]:
        start = f"{self.prefix}/" if self.prefix else ""
        files: list[SyncFile] = []
        try:
            for page in self.client.get_paginator("list_objects_v2").paginate(
                Bucket=self.bucket, Prefix=start
            ):
                for item in page.get("Contents", []):
                    relative = item["Key"][len(start) :]
                    if relative and not relative.endswith("/") and is_ingestible(relative):
                        files.append(SyncFile(relative, lambda key=item["Key"]: self._read(key)))
        except (BotoCoreError, ClientError) as exc:
            raise SyncSourceError(f"cannot list {self.root}: {_reason(exc)}") from exc
        return sorted(files, key=lambda f: f.path)

    def _read(self, key: str) -> bytes:
        try:
            body = self.client.get_object(Bucket=self.bucket, Key=key)["Body"]
            try:
                return bytes(body.read())
            finally:
                body.close()
        except (BotoCoreError, ClientError) as exc:
            raise OSError(f"cannot read s3://{self.bucket}/{key}: {_reason(exc)}") from exc
