"""A part configured or used without its extra is one line naming the extra to install.

Each case runs the real ``ragstream`` command in a process where the extra's modules cannot be
imported (``sys.modules[name] = None``, which is what a missing package looks like to ``import``);
``tests/test_install.py`` does the same on a real default install, from the wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rag_tools.extras import EXTRAS, MissingExtra, require_extra

from .office_files import sample

ROOT = Path(__file__).resolve().parent.parent

_RUN = """
import sys
for name in sys.argv[1].split(","):
    sys.modules[name] = None
from ragstream.cli import main
sys.exit(main(sys.argv[2:]))
"""

#: extra, the modules made missing, the command, extra environment, the file the command reads
CASES = [
    ("postgres", "asyncpg", ["serve", "--database-url", "postgresql://127.0.0.1:1/db"], {}),
    ("redis", "redis", ["serve", "--redis-url", "redis://127.0.0.1:1"], {}),
    ("otel", "opentelemetry.sdk", ["serve"], {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}),
    ("openai", "openai", ["serve", "--model", "openai:gpt-4o-mini"], {"OPENAI_API_KEY": "sk-test"}),
    (
        "anthropic",
        "anthropic",
        ["serve", "--model", "anthropic:claude-sonnet-4-5"],
        {"ANTHROPIC_API_KEY": "k"},
    ),
    ("s3", "boto3", ["sync", "s3://team-kb/handbook", "--no-progress"], {}),
    ("office", "docx", ["ingest", "{dir}/handbook.docx", "--no-progress"], {}),
    (
        "wordllama",
        "wordllama",
        ["ingest", "{dir}/notes.md", "--no-progress", "--embedder", "local:wordllama"],
        {},
    ),
]


def _ragstream(
    blocked: str, argv: list[str], env: dict[str, str], tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "notes.md").write_text("# Notes\n\nBackups are kept for thirty days.\n")
    (tmp_path / "handbook.docx").write_bytes(sample("support-onboarding.docx"))
    full_env = {**os.environ, "RAGSTREAM_DATA_DIR": str(tmp_path / "data"), **env}
    full_env.pop("RAGSTREAM_WORKER_CONFIG", None)
    args = [a.format(dir=tmp_path) for a in argv]
    return subprocess.run(
        [sys.executable, "-c", _RUN, blocked, *args],
        capture_output=True,
        text=True,
        env=full_env,
        cwd=ROOT,
        timeout=120,
    )


@pytest.mark.parametrize(("extra", "blocked", "argv", "env"), CASES, ids=[c[0] for c in CASES])
def test_a_missing_extra_is_one_line_naming_it(
    extra: str, blocked: str, argv: list[str], env: dict[str, str], tmp_path: Path
) -> None:
    done = _ragstream(blocked, argv, env, tmp_path)
    assert done.returncode != 0, done
    lines = [line for line in done.stderr.splitlines() if "ragstream[" in line]
    assert len(lines) == 1, done.stderr
    assert f"pip install 'ragstream[{extra}]'" in lines[0]
    assert "Traceback" not in done.stderr, done.stderr


def test_every_extra_in_the_table_is_one_of_the_distribution() -> None:
    """The helper's table and pyproject's extras are the same set (plus [all] and [test])."""
    import tomllib

    declared = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    assert declared - {"all", "test"} == set(EXTRAS)


def test_require_extra_names_the_extra_and_the_module() -> None:
    with pytest.raises(MissingExtra) as caught:
        require_extra("office", "ragstream_no_such_module")
    message = str(caught.value)
    assert "\n" not in message
    assert "pip install 'ragstream[office]'" in message and "ragstream_no_such_module" in message
    assert isinstance(caught.value, ImportError)
    assert require_extra("office", "docx").__name__ == "docx"


#: The top-level modules the extras bring (the default install has none of them).
EXTRA_MODULES = (
    "PIL docx pptx openpyxl ebooklib boto3 botocore asyncpg saq psycopg psycopg_pool redis "
    "opentelemetry.sdk opentelemetry.exporter opentelemetry.instrumentation openai anthropic google.genai "
    "mcp pytesseract pypdfium2 wordllama"
)


def test_the_default_install_imports_nothing_an_extra_brings(tmp_path: Path) -> None:
    """The app is built and the commands load with every extra's modules missing (a quick guard;
    tests/test_install.py shows it on a real default install)."""
    code = f"""
import sys
for name in {EXTRA_MODULES!r}.split():
    sys.modules[name] = None
import ragstream.cli, ragstream.commands, ragstream.app
from ragstream.config import AppConfig
ragstream.app.create_app(AppConfig(data_dir={str(tmp_path)!r}))
print("built")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "built", done.stderr
