"""Extract the ``v1`` openAPIV3Schema of a KubeRay CRD file as JSON (how the files here were made).

Usage, from a KubeRay checkout at the release tag:
    python extract.py ray-operator/config/crd/bases/ray.io_rayclusters.yaml raycluster.v1.schema.json
    python extract.py ray-operator/config/crd/bases/ray.io_rayservices.yaml rayservice.v1.schema.json

The schema is copied unchanged (keys sorted, one-space indent) so that a diff against a newer
release shows what KubeRay changed. The tests make it strict (no unknown fields) when they load it.
"""

from __future__ import annotations

import json
import sys

import yaml


def main(crd_path: str, out_path: str) -> None:
    with open(crd_path) as fh:
        crd = yaml.safe_load(fh)
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    with open(out_path, "w") as fh:
        json.dump(version["schema"]["openAPIV3Schema"], fh, indent=1, sort_keys=True)
        fh.write("\n")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
