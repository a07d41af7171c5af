"""A small policy file to load in tests: an untrained scorer with the given metadata."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from deepshare.policies.checkpoint import export_scorer
from deepshare.policies.encoding import EncodingConfig
from deepshare.policies.scorer_net import CandidateScorer


def write_policy_file(path: Path, metadata: dict[str, Any], encoding: EncodingConfig | None = None) -> Path:
    """``path`` holding a width-8 scorer, ``encoding`` (default: the default encoding) and ``metadata``."""
    encoding = encoding or EncodingConfig()
    export_scorer(CandidateScorer(len(encoding.features), 8), encoding, path, metadata)
    return path
