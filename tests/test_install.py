"""The wheel is the product: built from a clean clone, installed into a new virtualenv with no
repository at hand, ``ragstream serve`` serves the chat page and answers offline.

The build is what a release does: ``uv build`` makes the sdist (the build backend builds the chat
page into it with npm) and then the wheel from that sdist (no Node needed there). The wheel is
installed with its default dependencies only, so the same virtualenv shows that each optional part
is one line naming its extra.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from .office_files import sample
from .protocol import parse_sse, run_body
from .servers import free_port
from .test_shadowing import check_users_modules_do_not_shadow, users_folder

ROOT = Path(__file__).resolve().parent.parent
UV = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1500),
    pytest.mark.skipif(UV is None, reason="uv builds and installs the wheel (scripts/setup.sh installs it)"),
]


def _run(*args: str | Path, cwd: Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    done = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _user_env(home: Path) -> dict[str, str]:
    """A user's environment: nothing of this repository or its virtualenv on any path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGSTREAM_", "OTEL_", "VIRTUAL_ENV"))}
    env.pop("PYTHONPATH", None)
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p)
    env["RAGSTREAM_DATA_DIR"] = str(home / "data")
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the new virtualenv, a user's folder): the wheel from a clean clone, installed alone."""
    assert UV is not None
    work = tmp_path_factory.mktemp("install")
    clone = work / "clone"
    _run("git", "clone", "--quiet", "--no-hardlinks", ROOT, clone, cwd=work)
    assert not (clone / "server" / "static").exists()  # the page is not in the repository
    _run(UV, "build", "--quiet", "--out-dir", work / "dist", cwd=clone)  # sdist, then the wheel from it
    (wheel,) = (work / "dist").glob("ragstream-*.whl")
    venv = work / "venv"
    _run(UV, "venv", "--quiet", "--python", sys.executable, venv, cwd=work)
    _run(UV, "pip", "install", "--quiet", "--python", venv / "bin" / "python", wheel, cwd=work)
    home = work / "home"
    home.mkdir()
    return venv, home


def test_the_wheel_carries_the_page_the_license_and_the_version(installed: tuple[Path, Path]) -> None:
    venv, home = installed
    version = _run(venv / "bin" / "ragstream", "--version", cwd=home, env=_user_env(home))
    assert version.startswith("ragstream ") and version.split()[1][0].isdigit()
    (site,) = (venv / "lib").glob("python*/site-packages")
    assert (site / "ragstream" / "static" / "index.html").is_file()
    assert list((site / "ragstream" / "static" / "assets").glob("*.js"))
    # the server is the import package ragstream: no generic top-level name (tests/test_shadowing.py)
    (record,) = site.glob("ragstream-*.dist-info/RECORD")
    files = [line.split(",", 1)[0] for line in record.read_text().splitlines()]
    top = {name.split("/", 1)[0] for name in files if not name.startswith("..")}  # bin/ragstream is ../..
    assert {name for name in top if not name.endswith(".dist-info")} == {"ragstream", "rag_tools"}, top
    (license_file,) = site.glob("ragstream-*.dist-info/licenses/LICENSE")
    assert "Apache License" in license_file.read_text()


def test_ragstream_serve_from_the_wheel_serves_the_page_and_answers(installed: tuple[Path, Path]) -> None:
    venv, home = installed
    (home / "notes.md").write_text(
        "# Backups\n\nNightly database backups are retained for thirty days in the vault.\n"
    )
    port = free_port()
    env = _user_env(home)
    process = subprocess.Popen(
        [venv / "bin" / "ragstream", "serve", "--port", str(port), "--ingest", "notes.md"],
        cwd=home,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=url, timeout=30) as http:
            deadline = time.monotonic() + 300
            while True:
                assert process.poll() is None, process.stdout.read() if process.stdout else ""
                try:
                    if http.get("/ready").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the installed server did not get ready"
                time.sleep(0.5)
            page = http.get("/")
            assert page.status_code == 200 and "not built" not in page.text
            asset = page.text.split('src="', 1)[1].split('"', 1)[0]
            assert asset.startswith("/assets/") and http.get(asset).status_code == 200
            answer = http.post("/agui", json=run_body("t1", "r1", "How long are nightly backups retained?"))
            assert answer.status_code == 200
            events = [event for _, event in parse_sse(answer.text)]
            assert events[-1]["type"] == "RUN_FINISHED", events[-3:]
            text = "".join(e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT")
            assert "thirty days" in text
    finally:
        process.terminate()
        process.wait(30)


def test_a_users_server_py_does_not_shadow_the_installed_ragstream(installed: tuple[Path, Path]) -> None:
    venv, home = installed
    folder = users_folder(home / "project")
    check_users_modules_do_not_shadow(venv / "bin" / "ragstream", folder, _user_env(folder))


@pytest.mark.parametrize(
    ("extra", "argv", "env"),
    [
        ("postgres", ["serve", "--database-url", "postgresql://127.0.0.1:1/db"], {}),
        ("redis", ["serve", "--redis-url", "redis://127.0.0.1:1"], {}),
        ("otel", ["serve"], {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:1"}),
        ("s3", ["sync", "s3://team-kb/handbook", "--no-progress"], {}),
        ("office", ["ingest", "onboarding.docx", "--no-progress"], {}),
    ],
)
def test_each_missing_extra_of_the_default_install_is_one_line(
    installed: tuple[Path, Path], extra: str, argv: list[str], env: dict[str, str]
) -> None:
    venv, home = installed
    (home / "onboarding.docx").write_bytes(sample("support-onboarding.docx"))
    done = subprocess.run(
        [venv / "bin" / "ragstream", *argv],
        cwd=home,
        env={**_user_env(home), **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode != 0
    assert "Traceback" not in done.stderr, done.stderr
    (line,) = [line for line in done.stderr.splitlines() if "ragstream[" in line]
    assert f"pip install 'ragstream[{extra}]'" in line
