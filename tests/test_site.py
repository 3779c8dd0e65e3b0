"""The docs site builds with ``mkdocs build --strict``: every page in the nav, every link and anchor
found, the API reference rendered from the docstrings without a warning."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as ``mkdocs build --strict`` writes it (into a temporary folder, not ``site/``)."""
    target = tmp_path_factory.mktemp("site")
    config, site = str(ROOT / "mkdocs.yml"), str(target / "site")
    built = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", config, "--site-dir", site],
        cwd=target,  # not the repository: the paths in mkdocs.yml hold wherever mkdocs runs from
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # the theme's end-of-life banner
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert built.returncode == 0, built.stderr[-5000:]
    assert "WARNING" not in built.stderr, built.stderr[-5000:]
    return target / "site"


def test_the_site_builds_strict_with_the_api_reference_from_the_docstrings(site: Path) -> None:
    reference = (site / "reference" / "rag_tools" / "index.html").read_text()
    for name in ("build_toolkit", "ToolContext", "KnowledgeBase", "create_search_toolset"):
        assert f'id="rag_tools.{name}"' in reference, name
    assert "sharing one filter" in reference  # build_toolkit's docstring, rendered
    tools = (site / "reference" / "tools" / "index.html").read_text()
    assert 'id="rag_tools.tools.ToolResult"' in tools
    auth = (site / "reference" / "auth" / "index.html").read_text()
    assert 'id="ragstream.auth.Principal"' in auth and 'id="ragstream.auth.Refused"' in auth


def test_the_readmes_images_are_where_they_point(site: Path) -> None:
    for readme, image in (
        ("README.md", "docs/screenshot.png"),
        ("frontend/README.md", "../docs/versions.png"),
    ):
        assert f"]({image})" in (ROOT / readme).read_text()
        assert (ROOT / readme).parent.joinpath(image).is_file()
    assert (site / "screenshot.png").is_file()  # the site's home page shows it too
