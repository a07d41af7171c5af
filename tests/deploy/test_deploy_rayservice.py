"""The placement service's RayService manifest: valid for KubeRay and Ray Serve, the same
application as ``serve/config.yaml``, its token only from a Secret, readiness on ``/healthz``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kuberay_crd import errors

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy" / "kuberay" / "rayservice-placement.yaml"
SERVE_CONFIG = ROOT / "serve" / "config.yaml"


@pytest.fixture(scope="module")
def manifest() -> dict:
    (doc,) = list(yaml.safe_load_all(MANIFEST.read_text()))
    return doc


@pytest.fixture(scope="module")
def serve_config(manifest):
    from ray.serve.schema import ServeDeploySchema

    return ServeDeploySchema.model_validate(yaml.safe_load(manifest["spec"]["serveConfigV2"]))


def containers(manifest: dict) -> list[dict]:
    cluster = manifest["spec"]["rayClusterConfig"]
    groups = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    return [c for g in groups for c in g["template"]["spec"]["containers"]]


def test_it_is_a_rayservice_the_v1_7_crd_accepts(manifest):
    assert (manifest["apiVersion"], manifest["kind"]) == ("ray.io/v1", "RayService")
    assert errors(manifest) == []


def test_serve_config_v2_is_a_valid_serve_config_of_the_same_application(serve_config):
    from ray.serve.schema import ServeDeploySchema

    from deepshare.serving.deployment import PlacementService
    from deepshare.serving.settings import ServiceSettings

    local = ServeDeploySchema.model_validate(yaml.safe_load(SERVE_CONFIG.read_text()))
    [app], [local_app] = serve_config.applications, local.applications
    assert app.import_path == local_app.import_path == "deepshare.serving.deployment:build_app"
    assert app.args == local_app.args and "token" not in app.args
    ServiceSettings.model_validate(app.args)
    assert [d.name for d in app.deployments] == [PlacementService.name]
    assert [d.model_dump() for d in app.deployments] == [d.model_dump() for d in local_app.deployments]
    # in a cluster the proxies must listen on the pod's address, on every node
    assert (serve_config.http_options.host, serve_config.http_options.port) == ("0.0.0.0", 8000)
    assert serve_config.proxy_location.value == "EveryNode"


def test_the_application_builds_from_these_args_with_the_token_from_the_environment(serve_config, monkeypatch):
    from deepshare.serving.deployment import build_app

    monkeypatch.setenv("DEEPSHARE_SERVE_TOKEN", "from-the-secret-123")
    app = build_app(serve_config.applications[0].args)
    (settings,) = app._bound_deployment.init_args  # what each replica gets (Serve's private field)
    assert settings["token"] == "from-the-secret-123"  # the Secret's value, read where Serve builds the app
    assert settings["policy"] == "rl-hybrid"


def test_every_container_reads_the_token_from_the_secret_and_nothing_secret_is_written(manifest):
    for container in containers(manifest):
        env = {e["name"]: e for e in container["env"]}
        token = env["DEEPSHARE_SERVE_TOKEN"]
        assert "value" not in token
        assert token["valueFrom"]["secretKeyRef"] == {"name": "deepshare-serve-token", "key": "token"}
    text = MANIFEST.read_text()
    assert "kind: Secret" not in text
    assert "kubectl create secret generic deepshare-serve-token" in text  # the header says how to make it


def test_worker_readiness_is_the_services_healthz_on_the_serve_port(manifest, serve_config):
    from deepshare.serving.middleware import OPEN_PATHS

    workers = manifest["spec"]["rayClusterConfig"]["workerGroupSpecs"]
    assert workers
    for group in workers:
        (container,) = group["template"]["spec"]["containers"]
        probe = container["readinessProbe"]["httpGet"]
        assert probe == {"path": "/healthz", "port": serve_config.http_options.port}
        assert {"containerPort": 8000, "name": "serve"} in container["ports"]
    assert "/healthz" in OPEN_PATHS  # a probe carries no token, so the route must be open
    assert manifest["spec"]["excludeHeadPodFromServeSvc"] is True
    assert manifest["spec"]["rayClusterConfig"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"


def test_ray_version_matches_the_pinned_ray(manifest):
    import ray

    assert manifest["spec"]["rayClusterConfig"]["rayVersion"] == ray.__version__
