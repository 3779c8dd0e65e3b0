"""The image and the manifests, checked as far as this machine can without Docker or a cluster (base
images cannot be pulled here): the Dockerfile with hadolint and for what the issue asks of it, the
compose file against the compose-spec schema, the Helm chart with Helm's own lint and render (its Go
SDK, helm-python-sdk) and every rendered object against Kubernetes' schemas (kubernetes-validate).
docs/deployment.md, "Images and manifests", says what this leaves unexercised."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import helm_python as helm
import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "deploy" / "helm" / "ragstream"
BIN = Path(sys.executable).parent
KUBERNETES = "1.30.0"


def test_the_dockerfile_lints_clean_and_is_what_an_operator_needs() -> None:
    lint = subprocess.run(
        [BIN / "hadolint", "--failure-threshold", "info", "Dockerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert lint.returncode == 0, lint.stdout + lint.stderr
    text = (ROOT / "Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\w+))?", text, re.MULTILINE)
    assert [name for _, name in stages] == ["node", "build", "runtime"]  # multi-stage, runtime last
    runtime = text.split("AS runtime", 1)[1]
    assert "COPY --from=build /opt/ragstream /opt/ragstream" in runtime  # the venv only, no sources
    (user,) = re.findall(r"^USER\s+(\S+)", runtime, re.MULTILINE)
    assert not user.startswith(("0", "root"))
    assert re.search(r"^HEALTHCHECK .*\n?.*/health", runtime, re.MULTILINE)
    assert "HF_HUB_OFFLINE=1" in runtime and 'ENTRYPOINT ["ragstream"]' in runtime
    assert "uv build --wheel" in text  # the wheel, with the page its build backend builds


def test_the_dockerfiles_offline_embedder_check_runs(tmp_path: Path) -> None:
    """The build step that proves the weights are inside the image, run in this virtualenv."""
    (check,) = re.findall(
        r'^RUN HF_HUB_OFFLINE=1 /opt/ragstream/bin/python -c "(.+)"$',
        (ROOT / "Dockerfile").read_text(),
        re.MULTILINE,
    )
    done = subprocess.run(
        [sys.executable, "-c", check],
        cwd=tmp_path,
        env={"HF_HUB_OFFLINE": "1", "PATH": str(BIN), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "(1, 384)"


def test_the_compose_file_fits_the_compose_spec() -> None:
    check = subprocess.run(
        [BIN / "check-jsonschema", "--builtin-schema", "vendor.compose-spec", "compose.yaml"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert check.returncode == 0, check.stdout + check.stderr
    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    assert {"server", "worker", "postgres", "redis", "minio"} <= set(services)
    server = services["server"]
    assert server["environment"]["RAGSTREAM_KB_URI"].startswith("s3://")
    assert server["environment"]["RAGSTREAM_DATABASE_URL"].startswith("postgresql://")
    assert server["environment"]["RAGSTREAM_REDIS_URL"].startswith("redis://")
    assert server["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert "ports" not in services["worker"]  # the worker works the queue, it is not published


def _render(values: dict[str, Any]) -> list[dict[str, Any]]:
    with helm.Chart.load(str(CHART)) as chart:
        chart.validate_schema(values)
        rendered = chart.render(values, name="team", namespace="ragstream")
    return [
        doc
        for name, text in rendered.items()
        if name.endswith(".yaml")
        for doc in yaml.safe_load_all(text)
        if doc
    ]


def test_the_chart_lints_and_renders_objects_kubernetes_accepts() -> None:
    lint = helm.lint(str(CHART))
    assert lint["errors"] == [] and all(m["severity"] < 2 for m in lint["messages"]), lint
    team = {
        "replicaCount": 3,
        "config": {"kbUri": "s3://team-kb/ragstream", "oidcIssuer": "https://login.example.com/realms/team"},
        "secrets": {
            "databaseUrl": "postgresql://ragstream:pw@db:5432/ragstream",
            "redisUrl": "redis://redis:6379/0",
            "s3": {"accessKeyId": "AKIA", "secretAccessKey": "s3cret", "endpointUrl": "http://minio:9000"},
            "oidcClientSecret": "client-secret",
        },
        "persistence": {"enabled": False},
    }
    for values in ({}, team):
        objects = _render(values)
        for obj in objects:
            kubernetes_validate.validate(obj, KUBERNETES, strict=True)
        kinds = {obj["kind"]: obj for obj in objects}
        assert {"Deployment", "Service", "Secret"} <= set(kinds)
        deployment = kinds["Deployment"]
        pod = deployment["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["livenessProbe"]["httpGet"]["path"] == "/health"
        assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
        run_timeout = int(next(e["value"] for e in container["env"] if e["name"] == "RAGSTREAM_RUN_TIMEOUT"))
        assert pod["terminationGracePeriodSeconds"] > run_timeout  # a stop ends runs, clients listening
        assert pod["securityContext"]["runAsNonRoot"] is True
        assert container["envFrom"][0]["secretRef"]["name"] == kinds["Secret"]["metadata"]["name"]
    assert deployment["spec"]["replicas"] == 3
    secret = kinds["Secret"]["stringData"]
    assert {
        "RAGSTREAM_DATABASE_URL",
        "RAGSTREAM_REDIS_URL",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    } <= set(secret)
    assert "OIDC_CLIENT_SECRET" in secret
    assert "PersistentVolumeClaim" not in kinds  # replicas keep their data in S3 and PostgreSQL


@pytest.mark.parametrize(
    ("values", "says"),
    [
        ({"replicaCount": 2}, "replicaCount > 1 needs Redis"),
        ({"terminationGracePeriodSeconds": 60}, "must be longer than config.runTimeoutSeconds (300)"),
    ],
)
def test_the_chart_refuses_what_would_not_work(values: dict[str, Any], says: str) -> None:
    with pytest.raises(Exception, match=re.escape(says)):
        _render(values)
