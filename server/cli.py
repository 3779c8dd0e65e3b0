"""The ``ragstream`` command: ``serve``, ``mcp``, ``ingest``, ``sync``, ``search``, ``documents`` and ``eval``."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from rag_tools.allocator import limit_arenas
from rag_tools.extras import MissingExtra

from .config import AppConfig, installed_version, invalid_settings, unreadable_setting

__all__ = ["main"]

_SEARCH_MODES = ("hybrid", "vector", "text")
_GROUPS_HELP = (
    "only members of these groups (comma-separated) may read the documents; '' makes them everyone's; "
    "without it a known document keeps its groups and a new one is everyone's"
)


def _groups(value: str) -> tuple[str, ...]:
    """``--groups a,b``: checked group names (``''``: everyone)."""
    from rag_tools.kb.access import InvalidGroups, check_groups

    try:
        return check_groups([name.strip() for name in value.split(",") if name.strip()])
    except InvalidGroups as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _modes(value: str) -> tuple[str, ...]:
    """``--modes hybrid,text``: known search modes, at least one."""
    modes = tuple(dict.fromkeys(m.strip() for m in value.split(",") if m.strip()))
    unknown = [m for m in modes if m not in _SEARCH_MODES]
    if unknown or not modes:
        raise argparse.ArgumentTypeError(
            f"unknown search mode {', '.join(map(repr, unknown)) or repr(value)}; use {', '.join(_SEARCH_MODES)}"
        )
    return modes


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", dest="data_dir", help="data directory (RAGSTREAM_DATA_DIR)")
    parser.add_argument("--embedder", help="embedding model (RAGSTREAM_EMBEDDER)")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ragstream", description=__doc__)
    parser.add_argument("--version", action="version", version=f"ragstream {installed_version()}")
    commands = parser.add_subparsers(dest="command", required=True)

    serve = commands.add_parser("serve", help="run the AG-UI server")
    _common(serve)
    serve.add_argument("--host", help="interface to listen on (RAGSTREAM_HOST)")
    serve.add_argument("--port", type=int, help="port (RAGSTREAM_PORT)")
    serve.add_argument(
        "--model", help="chat model, e.g. openai:gpt-4o-mini (RAGSTREAM_MODEL); default: offline"
    )
    serve.add_argument("--workers", type=int, help="worker processes; more than one needs --redis-url")
    serve.add_argument(
        "--redis-url", dest="redis_url", help="Redis URL shared by workers (RAGSTREAM_REDIS_URL)"
    )
    serve.add_argument(
        "--database-url",
        dest="database_url",
        help="PostgreSQL URL keeping threads (RAGSTREAM_DATABASE_URL), e.g. postgresql://user@host/db",
    )
    serve.add_argument(
        "--state-key",
        dest="state_key",
        help="put the whole AG-UI state under this key (RAGSTREAM_STATE_KEY), e.g. ragstream",
    )
    serve.add_argument(
        "--ingest", nargs="+", default=[], metavar="PATH", help="ingest these paths before serving"
    )

    mcp = commands.add_parser(
        "mcp", help="serve the knowledge base as an MCP server: over stdio, or streamable HTTP with --http"
    )
    _common(mcp)
    mcp.add_argument("--http", action="store_true", help="streamable HTTP at /mcp instead of stdio")
    mcp.add_argument("--host", help="with --http: interface to listen on (RAGSTREAM_HOST)")
    mcp.add_argument("--port", type=int, help="with --http: port (RAGSTREAM_PORT)")
    mcp.add_argument("--model", help="the model answering ask (RAGSTREAM_MODEL); default: offline extractive")
    mcp.add_argument(
        "--allow-writes",
        action="store_true",
        help="offer ingest_document and delete_document, to editors (RAGSTREAM_MCP_ALLOW_WRITES)",
    )
    mcp.add_argument(
        "--token", help="stdio: call as the principal this bearer token signs in; default: the local operator"
    )

    ingest = commands.add_parser("ingest", help="add files, folders or globs to the knowledge base")
    _common(ingest)
    ingest.add_argument("paths", nargs="+", metavar="PATH")
    ingest.add_argument("--no-progress", action="store_true", help="no progress bar")
    ingest.add_argument("--groups", type=_groups, metavar="A,B", help=_GROUPS_HELP)

    sync = commands.add_parser(
        "sync", help="mirror a folder or an S3 prefix: ingest new and changed files, delete removed ones"
    )
    _common(sync)
    sync.add_argument("source", metavar="PATH|s3://bucket/prefix")
    sync.add_argument("--no-progress", action="store_true", help="no progress bar")
    sync.add_argument("--groups", type=_groups, metavar="A,B", help=_GROUPS_HELP)

    search = commands.add_parser("search", help="search the knowledge base")
    _common(search)
    search.add_argument("query")
    search.add_argument("--limit", type=int, default=None)
    search.add_argument(
        "--document", action="append", default=[], metavar="NAME", help="restrict to a document"
    )
    search.add_argument("--mode", choices=_SEARCH_MODES, default=None)

    documents = commands.add_parser("documents", help="list the documents in the knowledge base")
    _common(documents)
    documents.add_argument("--page", type=int, default=1)

    evaluate = commands.add_parser(
        "eval", help="measure search (and answers) on labelled questions: recall, MRR, nDCG, facts"
    )
    _common(evaluate)
    evaluate.add_argument("questions", metavar="QUESTIONS.jsonl", help="one labelled question per line")
    evaluate.add_argument(
        "--modes", type=_modes, default=_SEARCH_MODES, metavar="A,B", help="search modes (hybrid,vector,text)"
    )
    evaluate.add_argument(
        "--answers", action="store_true", help="also ask the chat agent each question (a fresh thread each)"
    )
    evaluate.add_argument("--model", help="chat model for --answers (RAGSTREAM_MODEL); default: offline")
    evaluate.add_argument("--report", metavar="FILE.html", help="write an HTML report with the plots")
    evaluate.add_argument("--json", dest="json_out", metavar="FILE.json", help="write the figures as JSON")
    evaluate.add_argument("--no-progress", action="store_true", help="no progress bar")
    return parser


_FLAGS = (
    "data_dir",
    "embedder",
    "host",
    "port",
    "model",
    "workers",
    "redis_url",
    "database_url",
    "state_key",
)


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings given as flags, which override the environment."""
    return {k: getattr(args, k) for k in _FLAGS if getattr(args, k, None) is not None}


def _config(args: argparse.Namespace) -> AppConfig:
    """The configuration: the environment, overridden by the flags given."""
    return AppConfig(**_overrides(args))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``ragstream`` console script; returns the exit status."""
    limit_arenas()  # before the worker threads allocate (the import of LanceDB made one arena already)
    args = _build_parser().parse_args(argv)
    try:
        return _run(args)
    except MissingExtra as exc:  # an optional part configured or used without its extra
        print(f"ragstream: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _run(args: argparse.Namespace) -> int:
    try:
        config = _config(args)
    except ValidationError as exc:
        print(f"ragstream: invalid configuration: {invalid_settings(exc, _overrides(args))}", file=sys.stderr)
        return 2
    except SettingsError as exc:
        print(f"ragstream: invalid configuration: {unreadable_setting(exc)}", file=sys.stderr)
        return 2
    from . import commands

    handler = getattr(commands, f"cmd_{args.command}")
    result = handler(config, args)
    return asyncio.run(result) if asyncio.iscoroutine(result) else int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
