"""The Dockerfile, checked statically (no Docker engine here): the official Ray base image at the
pinned Ray version with a cpu/gpu build argument, this package installed, a non-root user, no
secrets; and every manifest names the image the documentation says to build (docs/deploying.md)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
IMAGE = re.compile(r"^REGISTRY/deepshare:(?P<version>[0-9][^-]*)-(?P<variant>cpu|gpu)$")


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    joined = re.sub(r"\\\n", " ", "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#")))
    out = []
    for line in joined.splitlines():
        if line.strip():
            word, _, rest = line.strip().partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


@pytest.fixture(scope="module")
def steps() -> list[tuple[str, str]]:
    return instructions(DOCKERFILE.read_text())


def args_before_from(steps) -> dict[str, str]:  # type: ignore[no-untyped-def]
    found = {}
    for word, rest in steps:
        if word == "FROM":
            break
        if word == "ARG":
            name, _, default = rest.partition("=")
            found[name] = default
    return found


def test_base_is_the_official_ray_image_parametrised_by_version_python_and_variant(steps):
    import ray

    froms = [rest for word, rest in steps if word == "FROM"]
    assert froms == ["rayproject/ray:${RAY_VERSION}-${PYTHON_TAG}-${VARIANT}"]
    defaults = args_before_from(steps)
    assert defaults["RAY_VERSION"] == ray.__version__ and defaults["RAY_VERSION"].startswith("2.60.")
    assert re.fullmatch(r"py3\d+", defaults["PYTHON_TAG"]) and defaults["VARIANT"] == "cpu"
    for variant in ("cpu", "gpu"):  # Ray's tag convention: {version}-{python}-{platform}
        tag = f"{defaults['RAY_VERSION']}-{defaults['PYTHON_TAG']}-{variant}"
        assert re.fullmatch(r"\d+\.\d+\.\d+-py3\d+-(cpu|gpu)", tag)


def test_build_args_used_after_from_are_declared_again(steps):
    """An ARG declared before FROM is empty after it unless declared again (Docker's scoping)."""
    after = steps[[w for w, _ in steps].index("FROM") + 1:]
    declared = {rest.partition("=")[0] for word, rest in after if word == "ARG"}
    used = {m for word, rest in after if word != "ARG" for m in re.findall(r"\$\{?([A-Z_]+)\}?", rest)}
    assert {"VARIANT", "RAY_VERSION"} <= used
    assert used <= declared, used - declared


def test_the_package_is_installed_with_the_cpu_torch_wheel_for_the_cpu_variant(steps):
    runs = " ".join(rest for word, rest in steps if word == "RUN")
    assert re.search(r'cpu\) .*torch==\$\{TORCH_VERSION\}.*--index-url https://download\.pytorch\.org/whl/cpu', runs)
    assert re.search(r"gpu\) .*torch==\$\{TORCH_VERSION\}", runs)
    assert re.search(r"pip install --no-cache-dir \. ", runs)  # this package, from the copied source
    assert '"ray[rllib,serve,default]==${RAY_VERSION}"' in runs  # pip cannot move Ray off the base's version
    assert "exit 2" in runs  # an unknown VARIANT fails the build
    make = (ROOT / "Makefile").read_text()
    torch = re.search(r"TORCH_VERSION := (\S+)", make).group(1)  # the same torch as `make venv`
    assert ("ARG", f"TORCH_VERSION={torch}") in steps


def test_everything_copied_exists_and_the_package_source_is_copied(steps):
    sources = []
    for word, rest in steps:
        if word == "COPY":
            parts = [p for p in rest.split() if not p.startswith("--")]
            sources += parts[:-1]
    assert {"pyproject.toml", "deepshare"} <= set(sources)
    for src in sources:
        assert (ROOT / src).exists(), src
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert not set(sources) & set(ignored)
    assert {".git", ".venv", "runs", ".env", "*.pem", "**/.ray"} <= set(ignored)


def test_every_file_pyproject_names_is_copied(steps):
    """setuptools needs ``readme`` and ``license-files`` to build (a missing license file is a
    warning today and an error from 2027)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    copied = {p for word, rest in steps if word == "COPY" for p in rest.split()[:-1] if not p.startswith("--")}
    assert {project["readme"], *project["license-files"]} <= copied


def test_it_runs_as_the_ray_images_non_root_user_by_number(steps):
    """``runAsNonRoot: true`` makes the kubelet check the image's USER, which it can do only for a
    numeric UID (a name such as ``ray`` fails the pod's start); 1000:100 is ``ray:users`` in Ray's image."""
    users = [rest for word, rest in steps if word == "USER"]
    assert users and users[-1] == "1000:100"
    assert all(re.search(r"--chown=1000:100\b", rest) for word, rest in steps if word == "COPY")


SECRET = re.compile(
    r"(AKIA[0-9A-Z]{16}|-----BEGIN [A-Z ]*PRIVATE KEY|ghp_[A-Za-z0-9]{20,}|xox[bp]-|"
    r"(TOKEN|SECRET|PASSWORD|API_KEY|ACCESS_KEY)[A-Z_]*\s*=)",
)


def test_no_secrets_are_baked_in(steps):
    text = DOCKERFILE.read_text()
    assert not SECRET.search(text)
    for word, rest in steps:
        if word in ("ENV", "ARG", "LABEL"):
            assert not re.search(r"token|secret|password|key", rest, re.I), rest
        if word in ("COPY", "ADD"):
            assert not re.search(r"\.ray|\.ssh|\.aws|token|\.env", rest), rest
    assert "not built here" in text.lower() and "no docker engine" in text.lower()


def test_the_secret_detector_catches_what_it_should():
    for bad in ("ENV DEEPSHARE_SERVE_TOKEN=abcdefgh", "ARG AWS_SECRET_ACCESS_KEY=x", "AKIAABCDEFGHIJKLMNOP"):
        assert SECRET.search(bad), bad


def manifest_images() -> list[tuple[Path, str, bool]]:
    """(file, image, whether that pod asks for GPUs) for every container of every manifest."""
    found = []
    for path in sorted([*ROOT.glob("cluster_yamls/*.yaml"), *ROOT.glob("deploy/**/*.yaml")]):
        for doc in yaml.safe_load_all(path.read_text()):
            stack = [doc]
            while stack:
                node = stack.pop()
                if isinstance(node, dict):
                    if "containers" in node and isinstance(node["containers"], list):
                        for c in node["containers"]:
                            gpu = "nvidia.com/gpu" in str((c.get("resources") or {}).get("limits", {}))
                            found.append((path, c["image"], gpu))
                    stack.extend(node.values())
                elif isinstance(node, list):
                    stack.extend(node)
    return found


def test_every_manifest_names_the_image_the_docs_say_to_build():
    readme = (ROOT / "docs" / "deploying.md").read_text()
    images = manifest_images()
    assert {p.name for p, _, _ in images} >= {"kuberay-autoscaling.yaml", "rayservice-placement.yaml"}
    for path, image, _ in images:
        m = IMAGE.match(image)
        assert m and m["version"] == VERSION, f"{path.name}: {image}"
        build = f"docker build --build-arg VARIANT={m['variant']} -t {image} ."
        assert build in readme, build
        assert build in DOCKERFILE.read_text()  # the header says the same
    kuberay = [(image, gpu) for p, image, gpu in images if p.name == "kuberay-autoscaling.yaml"]
    assert all(image.endswith("-gpu") for image, _ in kuberay)  # one image for head and GPU workers
    assert all(image.endswith("-cpu") for p, image, _ in images if p.name == "rayservice-placement.yaml")


def test_every_manifest_runs_the_ray_version_of_the_image(steps):
    version = args_before_from(steps)["RAY_VERSION"]
    for path in [ROOT / "cluster_yamls" / "kuberay-autoscaling.yaml", ROOT / "deploy" / "kuberay" / "rayservice-placement.yaml"]:
        text = path.read_text()
        assert f'rayVersion: "{version}"' in text, path.name
