# DeepShare container image: the official Ray image at the Ray version this project pins, with
# this package installed. One Dockerfile, two variants chosen by a build argument:
#
#   docker build --build-arg VARIANT=cpu -t REGISTRY/deepshare:0.1.0-cpu .   # placement service, simulator, training
#   docker build --build-arg VARIANT=gpu -t REGISTRY/deepshare:0.1.0-gpu .   # GPU workers (KubeRay cluster, live scheduler)
#
# Base: rayproject/ray:<RAY_VERSION>-<PYTHON_TAG>-<VARIANT>, e.g. rayproject/ray:2.60.0-py311-cpu
# (Ubuntu) or rayproject/ray:2.60.0-py311-gpu (alias of the image's default CUDA build). The CPU
# variant installs PyTorch's CPU wheel first (a bare `pip install torch` pulls a multi-GB CUDA
# build); the GPU variant installs the default (CUDA) wheel.
#
# NOT BUILT HERE: the machine this repository was developed on has no Docker engine, so this
# file has only been checked statically (tests/test_deploy_image.py: base image, build argument,
# package installed, non-root user, no secrets, image names used by the manifests). Build it
# and run `docker run --rm REGISTRY/deepshare:0.1.0-cpu deepshare --help` before relying on it.
#
# No secrets go into the image: the placement service's token comes from the environment at run
# time (DEEPSHARE_SERVE_TOKEN, a Kubernetes Secret in deploy/kuberay/rayservice-placement.yaml).

ARG RAY_VERSION=2.60.0
ARG PYTHON_TAG=py311
ARG VARIANT=cpu
FROM rayproject/ray:${RAY_VERSION}-${PYTHON_TAG}-${VARIANT}

# Build arguments declared before FROM are not visible after it: declare the ones used below again.
ARG RAY_VERSION
ARG VARIANT
ARG TORCH_VERSION=2.13.0

LABEL org.opencontainers.image.title="deepshare" \
      org.opencontainers.image.description="Network-contention-aware scheduling of distributed deep-learning jobs on Ray" \
      org.opencontainers.image.licenses="Apache-2.0"

# The Ray image's own non-root user `ray` (uid 1000, group users = 100) owns its Python
# environment. Numeric, not the name: Kubernetes can only check `runAsNonRoot: true` against a
# numeric USER (with a name the kubelet refuses to start the pod).
USER 1000:100
WORKDIR /home/ray/deepshare

# Everything pyproject.toml names (readme, license-files) must be in the build context of `pip install .`.
COPY --chown=1000:100 pyproject.toml README.md LICENSE ./
COPY --chown=1000:100 deepshare ./deepshare
COPY --chown=1000:100 serve ./serve
COPY --chown=1000:100 rllib_configs ./rllib_configs
COPY --chown=1000:100 examples ./examples

RUN set -eux; \
    case "${VARIANT}" in \
      cpu) python -m pip install --no-cache-dir "torch==${TORCH_VERSION}" --index-url https://download.pytorch.org/whl/cpu ;; \
      gpu) python -m pip install --no-cache-dir "torch==${TORCH_VERSION}" ;; \
      *) echo "VARIANT must be cpu or gpu, got '${VARIANT}'" >&2; exit 2 ;; \
    esac; \
    python -m pip install --no-cache-dir . "ray[rllib,serve,default]==${RAY_VERSION}"; \
    deepshare --help > /dev/null

ENV DEEPSHARE_IMAGE_VARIANT=${VARIANT}
