"""Shipped and trained learned policies: a small torch file -> a candidate scorer -> a policy.

``deepshare train`` exports ``policy.pt`` next to its RLlib checkpoints: the scorer's weights,
its width, the encoding it was trained with and what it was trained on: plain data that
``torch.load(weights_only=True)`` reads without running code. Loading needs torch only.
``rl-hybrid`` loads the network shipped in ``deepshare/data/policies/rl_est_ppo.pt``, ``rl-base``
the one in ``rl_est_imitation.pt`` and ``rl-hybrid-preempt`` that same network with its rules in
``rl_est_hybrid_preempt.pt``, unless given ``NAME=PATH``; ``rl-hybrid`` adds the safety net (see
``CHANGELOG.md`` for why each is that network). A file's encoding (its
``max_wait_s`` bound included) is used as trained.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from deepshare.core.errors import DeepShareError
from deepshare.policies.anchor import check_anchor
from deepshare.policies.encoding import FEATURES, EncodingConfig
from deepshare.policies.learned import HybridRules, LearnedPolicy

FORMAT_VERSION = 1


def export_scorer(scorer: Any, encoding: EncodingConfig, path: str | Path, metadata: dict[str, Any]) -> None:
    """Write a scorer's weights and what is needed to use them (called by the trainer and by
    ``deepshare export-policy``), atomically: a reader sees the old file or the whole new one."""
    import io

    import torch

    from deepshare.core.atomic import write_bytes_atomic

    buffer = io.BytesIO()
    torch.save(
        {
            "format": FORMAT_VERSION,
            "features": list(encoding.features),
            "hidden": scorer.hidden,
            "state_dict": scorer.state_dict(),
            "encoding": asdict(encoding),
            "metadata": plain(metadata),
        },
        buffer,
    )
    write_bytes_atomic(path, buffer.getvalue(), "policy file")


def plain(value: Any) -> Any:
    """``value`` as the data a weights-only load accepts: dicts, lists, tuples, str, int, float,
    bool and None; anything else (a ``Path``, an enum) becomes its string, so an export can never
    write a file its own loader refuses."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(plain(v) for v in value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def load_policy_file(path: str | Path) -> dict[str, Any]:
    """The checkpoint's document, loaded as data only.

    ``torch.load(weights_only=True)``: tensors, numbers, strings, lists, tuples and dicts, never
    a pickled callable, so a crafted file cannot run code in ``simulate``, ``evaluate`` or
    ``serve``. A file that names any other Python object is refused with one line, and so is
    any file torch cannot read this way; torch's own warnings about a foreign file (a raw
    pickle's protocol, say) are silenced, so the refusal stays the only line printed.
    """
    import io
    import pickle
    import warnings

    import torch

    from deepshare.core.files import POLICY_BYTES, read_input_bytes

    # A regular file within the bound, read first: torch.load on a FIFO would wait forever, on /dev/zero read forever.
    data = read_input_bytes(path, "policy file", POLICY_BYTES, label=f"policy checkpoint {path}",
                            not_found="file not found")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            doc = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        if "GLOBAL" in str(exc):
            raise DeepShareError(
                f"policy checkpoint {path}: refused: it names Python objects beyond tensors and plain data"
                " (loading it could run code); policy files hold weights only"
            ) from None
        raise DeepShareError(f"policy checkpoint {path}: not a DeepShare policy file (unreadable pickle)") from None
    except Exception as exc:  # torch raises many kinds for a corrupt or foreign file
        raise DeepShareError(f"policy checkpoint {path}: not a DeepShare policy file ({exc.__class__.__name__})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_VERSION:
        raise DeepShareError(f"policy checkpoint {path}: not a DeepShare policy file (format {FORMAT_VERSION})")
    encoding = doc.get("encoding")
    extras = encoding.get("extra_features", ()) if isinstance(encoding, dict) else ()
    if not isinstance(extras, (list, tuple)) or doc["features"] != list(FEATURES) + list(extras):
        raise DeepShareError(f"policy checkpoint {path}: trained on other features than this version encodes")
    return doc


class TorchScorer:
    """A trained :class:`CandidateScorer` as a scorer: one observation, or a batch of them.

    Both run torch on one thread: a pass this small is fastest there, and an intra-op thread
    pool spinning on a busy machine (training, a simulator, other replicas) costs milliseconds.
    When the network has the shipped shape, one observation, or a batch's rows stacked, goes
    through :func:`~deepshare.policies.scorer_net.lone_forward`: the network's own scores at a
    fifth of the modules' cost or less.
    """

    def __init__(self, net: Any) -> None:
        import torch

        from deepshare.policies.scorer_net import lone_forward

        self.net = net
        self._lone = lone_forward(net)
        self._threads = torch.get_num_threads
        self._set_threads = torch.set_num_threads

    @property
    def has_shortcut(self) -> bool:
        """One observation is scored through ``lone_forward`` (not as a batch of one)."""
        return self._lone is not None

    def __call__(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        lone = self._lone
        if lone is None:
            return self.batch([obs])[0]
        threads = self._threads()
        if threads == 1:  # the usual case: a decision scores thousands of steps on this path
            return lone(obs["observations"], obs["action_mask"])
        self._set_threads(1)
        try:
            return lone(obs["observations"], obs["action_mask"])
        finally:
            self._set_threads(threads)

    def batch(self, observations: list[dict[str, np.ndarray]]) -> list[np.ndarray]:
        """Scores of several observations in one forward pass (they share K and F).

        With the shortcut, the B observations' rows go through ``lone_forward`` as one (B x K, F)
        matrix: what the network's layers compute on a (B, K, F) batch (``linear`` folds the
        leading dimensions into one ``addmm``), without the modules' per-call cost, which on a
        CPU made a batch of a few small observations dearer than scoring them one by one
        (``tests/serving/test_serving_scoring.py`` checks the scores are the network's, bit for bit).
        """
        import torch

        threads = torch.get_num_threads()
        if threads != 1:
            torch.set_num_threads(1)
        try:
            lone = self._lone
            if lone is not None:
                k = observations[0]["action_mask"].shape[0]
                scores = lone(
                    np.concatenate([o["observations"] for o in observations]),
                    np.concatenate([o["action_mask"] for o in observations]),
                )
                return list(scores.reshape(len(observations), k))
            with torch.no_grad():
                rows = torch.from_numpy(np.stack([o["observations"] for o in observations]))
                mask = torch.from_numpy(np.stack([o["action_mask"] for o in observations]))
                return list(self.net(rows, mask)[0].numpy())
        finally:
            if threads != 1:
                torch.set_num_threads(threads)


def scorer_from_file(path: str | Path) -> tuple[TorchScorer, EncodingConfig, dict[str, Any]]:
    """The scorer, the encoding it was trained with and its training metadata."""
    import torch

    from deepshare.policies.scorer_net import CandidateScorer

    doc = load_policy_file(path)
    missing = [key for key in ("hidden", "state_dict", "encoding", "metadata") if key not in doc]
    if missing:
        raise DeepShareError(f"policy checkpoint {path}: not a DeepShare policy file (no {', '.join(missing)})")
    encoding = _encoding(doc["encoding"], path)
    hidden, weights, metadata = doc["hidden"], doc["state_dict"], doc["metadata"]
    if isinstance(hidden, bool) or not isinstance(hidden, int) or hidden < 1:
        raise DeepShareError(f"policy checkpoint {path}: hidden: expected a positive integer, got {hidden!r}")
    if not isinstance(metadata, dict):
        raise DeepShareError(f"policy checkpoint {path}: metadata: expected a mapping, got {type(metadata).__name__}")
    net = CandidateScorer(len(encoding.features), hidden)
    expected = {name: tuple(tensor.shape) for name, tensor in net.state_dict().items()}
    given = {name: tuple(getattr(tensor, "shape", ())) for name, tensor in weights.items()} if isinstance(weights, dict) else None
    if given is not None and not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in weights.values()):
        raise DeepShareError(f"policy checkpoint {path}: state_dict: expected real floating-point tensors")
    if given != expected:
        raise DeepShareError(
            f"policy checkpoint {path}: state_dict: expected the weights of a {len(encoding.features)}-feature, "
            f"{hidden}-wide scorer ({_shapes(expected)}), got {_shapes(given) if given is not None else type(weights).__name__}"
        )
    try:
        net.load_state_dict(weights)
    except (RuntimeError, TypeError) as exc:  # e.g. a tensor of another dtype torch cannot copy
        raise DeepShareError(f"policy checkpoint {path}: state_dict: {str(exc).strip().splitlines()[0]}") from None
    net.eval()
    return TorchScorer(net), encoding, metadata


def _shapes(shapes: dict[str, tuple[int, ...]]) -> str:
    return ", ".join(f"{name} {list(shape)}" for name, shape in shapes.items()) or "nothing"


def _encoding(given: Any, path: str | Path) -> EncodingConfig:
    """A file's encoding section as a config; a bad key or value (a hand-edited or foreign file)
    is a DeepShareError naming the file, not a traceback."""
    if not isinstance(given, dict):
        raise DeepShareError(f"policy checkpoint {path}: encoding: expected a mapping, got {type(given).__name__}")
    try:
        return EncodingConfig(**{k: tuple(v) if isinstance(v, list) else v for k, v in given.items()})
    except (TypeError, ValueError) as exc:
        raise DeepShareError(f"policy checkpoint {path}: encoding: {exc}") from None


SHIPPED = "rl_est_ppo.pt"
"""The network RL-hybrid loads by default: :data:`SHIPPED_BASE`'s, refined by 30 PPO iterations
under the same curriculum (``rllib_configs/rl_est_ppo.yaml``; it decides as before them), with the
safety net falling back to ``bsrsf+uncontended``. What it shipped before is in CHANGELOG.md."""
SHIPPED_BASE = "rl_est_imitation.pt"
"""The network RL-base loads by default: an exact imitation of ``bsrsf+uncontended`` trained
under the estimated information model with a curriculum of estimate errors and the unknown model
(``deepshare imitate rllib_configs/rl_est_imitate.yaml``), reading the encoding's belief and
history columns."""
SHIPPED_PREEMPT = "rl_est_hybrid_preempt.pt"
"""What RL-hybrid-preempt loads by default: :data:`SHIPPED_BASE`'s network (identical weights)
with ``hybrid_rules`` ``{min_ratio: 1.01, utilisation_floor: 0}`` (the safety net never fires),
``preemptive: bsrsf+uncontended+preempt`` and no gate."""


def shipped(name: str = SHIPPED) -> Path:
    return Path(str(resources.files("deepshare.data") / "policies" / name))


def learned_policy(name: str, path: str | Path | None, hybrid: bool) -> LearnedPolicy:
    """The policy a file's network drives; with ``hybrid`` the safety net's :class:`HybridRules`
    are the file's metadata key ``hybrid_rules`` (``{"min_ratio": .., "utilisation_floor": ..,
    "anchor": [order, placement]}``, any subset) over the defaults, so a network ships with the
    rules it was tuned for; a file without the key gets the defaults."""
    file = Path(path) if path else shipped(SHIPPED if hybrid else SHIPPED_BASE)
    score, encoding, metadata = scorer_from_file(file)
    rules = _hybrid_rules(metadata.get("hybrid_rules"), file) if hybrid else None
    return LearnedPolicy(name, score, encoding, rules, {**metadata, "checkpoint": str(file)})


def _hybrid_rules(given: Any, file: Path) -> HybridRules:
    """The file's ``hybrid_rules`` over the defaults; a bad key or value is a DeepShareError
    naming the file, the key and what was expected (a hand-edited file is user input)."""
    where = f"policy checkpoint {file}: metadata hybrid_rules"
    rules: dict[str, Any] = {}
    for key, value in rule_mapping(given, where, ("min_ratio", "utilisation_floor", "anchor")).items():
        if key == "anchor":
            if not isinstance(value, (list, tuple)):
                raise DeepShareError(f"{where}.anchor: expected [order, placement], got {value!r}")
            try:
                rules[key] = check_anchor(value)
            except ValueError as exc:
                raise DeepShareError(f"{where}.anchor: {exc}") from None
        else:
            rules[key] = rule_number(f"{where}.{key}", value)
    return HybridRules(**rules)


def rule_mapping(given: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """A policy file's rules section (``hybrid_rules``, ``preempt_rules``): a mapping whose keys are
    some of ``keys`` (absent or empty: no rules), else a DeepShareError naming ``where``."""
    if not given:
        return {}
    if not isinstance(given, dict):
        raise DeepShareError(f"{where}: expected a mapping of {', '.join(keys)}; got {given!r}")
    unknown = sorted(set(given) - set(keys))
    if unknown:
        raise DeepShareError(f"{where}: unknown {unknown}; expected {', '.join(keys)}")
    return given


def rule_number(where: str, value: Any) -> float:
    """A rule's threshold from a policy file's metadata: a finite number >= 0, else a
    DeepShareError naming ``where``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise DeepShareError(f"{where}: expected a number >= 0, got {value!r}")
    return float(value)
