"""A user's own modules never shadow ragstream's: ragstream installs one import package,
``ragstream`` (the repository's ``server/`` folder), beside ``rag_tools``, and no generic top-level
name a user's ``server.py`` or ``app.py`` could take.

The user's folder holds their sign-in hook (the documentation's ``myauth.py``) beside files named
like the modules of a web app, each of which fails loudly when imported. ``PYTHONPATH=.`` puts the
folder first on the path, as ``RAGSTREAM_AUTH=myauth:api_keys`` needs (the console script does not
look in the working directory). ``tests/test_install.py`` runs the same check on the installed wheel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx

from .servers import free_port
from .snippets import snippet

#: Modules a user's project commonly has, each failing when imported.
USER_MODULES = ("server", "app", "config", "auth", "cli", "commands", "errors")


def users_folder(home: Path) -> Path:
    """``home`` with the user's sign-in hook and their own ``server.py`` (and the like) in it."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "myauth.py").write_text(snippet("auth hook"))
    for name in USER_MODULES:
        (home / f"{name}.py").write_text(f'raise RuntimeError("the user\'s own {name}.py was imported")\n')
    return home


def check_users_modules_do_not_shadow(ragstream: Path, home: Path, env: dict[str, str]) -> None:
    """``ragstream --help``, ``--version`` and ``serve`` with the user's hook work from ``home``."""
    env = {**env, "PYTHONPATH": ".", "RAGSTREAM_DATA_DIR": str(home / "data")}
    for flag in ("--help", "--version"):
        done = subprocess.run(
            [ragstream, flag], cwd=home, env=env, capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr and "was imported" not in done.stderr, done.stderr
        assert done.stdout.startswith("usage: ragstream" if flag == "--help" else "ragstream ")
    port = free_port()
    process = subprocess.Popen(
        [ragstream, "serve", "--port", str(port)],
        cwd=home,
        env={**env, "RAGSTREAM_AUTH": "myauth:api_keys"},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as http:
            deadline = time.monotonic() + 300
            while True:
                if process.poll() is not None:
                    raise AssertionError(process.stdout.read() if process.stdout else "serve ended")
                try:
                    if http.get("/ready").status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "ragstream serve did not get ready"
                time.sleep(0.5)
            # the user's hook signs callers in: it was imported, and ragstream's own modules with it
            assert http.get("/threads", headers={"X-Api-Key": "key-alice"}).status_code == 200
            refused = http.get("/threads", headers={"X-Api-Key": "key-mallory"})
            assert (refused.status_code, refused.json()["error"]["message"]) == (401, "unknown API key")
    finally:
        process.terminate()
        process.wait(30)


def test_a_users_server_py_does_not_shadow_ragstream(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAGSTREAM_")}
    check_users_modules_do_not_shadow(Path(sys.executable).parent / "ragstream", users_folder(tmp_path), env)
