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
import numbers
from dataclasses import asdict, fields
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from deepshare.core.errors import DeepShareError, shown
from deepshare.policies.anchor import check_anchor
from deepshare.policies.encoding import FEATURES, EncodingConfig
from deepshare.policies.learned import MAX_ANCHOR_STREAK, HybridRules, LearnedPolicy

FORMAT_VERSION = 1


def export_scorer(scorer: Any, encoding: EncodingConfig, path: str | Path, metadata: dict[str, Any]) -> None:
    """Write a scorer's weights and what is needed to use them (called by the trainer),
    atomically: a reader sees the old file or the whole new one."""
    from deepshare.core.atomic import write_bytes_atomic

    write_bytes_atomic(path, policy_file_bytes(scorer, encoding, metadata), "policy file")


def policy_file_bytes(scorer: Any, encoding: EncodingConfig, metadata: dict[str, Any]) -> bytes:
    """The bytes of a policy file: a scorer's weights and what is needed to use them."""
    import io

    import torch

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
    return buffer.getvalue()


MAX_METADATA_DEPTH = 32
"""Deepest nesting of a policy file's metadata (what the trainer writes is 4 levels deep): deeper
documents ended a load or an export in a RecursionError."""
MAX_METADATA_VALUES = 100_000
"""Most values a policy file's metadata may stand for (the shipped files' hold at most 150)."""
MAX_HIDDEN = 4096
"""Widest scorer a policy file may declare (the shipped ones are 64): the width sizes the network
built to receive the weights, so a 30 KB file declaring 30,000 took 3.75 GB before its weights
were compared."""


def plain(value: Any) -> Any:
    """``value`` as the data a weights-only load accepts: dicts, lists, tuples, str, int, float,
    bool and None; anything else (a ``Path``, an enum, a tensor, bytes) becomes its string, so an
    export can never write a file its own loader refuses, and a loaded file's metadata is plain
    data whatever it held. Nested deeper than :data:`MAX_METADATA_DEPTH`, or standing for more than
    :data:`MAX_METADATA_VALUES` values: a DeepShareError."""
    return _plain(value, 0, [MAX_METADATA_VALUES])


def _plain(value: Any, depth: int, left: list[int]) -> Any:
    """:func:`plain`, counting down the values copied in ``left``: a pickle shares an object
    referenced twice, so 30 levels of ``[x, x]`` (29 KB) stood for 2**30 lists once copied."""
    if depth > MAX_METADATA_DEPTH:
        raise DeepShareError(f"metadata nested deeper than {MAX_METADATA_DEPTH} levels")
    left[0] -= 1
    if left[0] < 0:
        raise DeepShareError(f"metadata stands for more than {MAX_METADATA_VALUES:,} values (shared references "
                             "counted once per reference); a policy's metadata holds a few hundred")
    if isinstance(value, dict):
        return {str(k): _plain(v, depth + 1, left) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_plain(v, depth + 1, left) for v in value)
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
    named = str(path) if len(str(path)) <= 4096 else shown(str(path))  # past PATH_MAX no file: a name cut short
    data = read_input_bytes(path, "policy file", POLICY_BYTES, label=f"policy checkpoint {named}",
                            not_found="file not found")
    _check_archive(data, path, POLICY_BYTES)
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
    version = doc.get("format") if isinstance(doc, dict) else None
    if type(version) is not int or version != FORMAT_VERSION:  # (True, 1.0 and tensor(1) equal 1)
        raise DeepShareError(f"policy checkpoint {path}: not a DeepShare policy file (format {FORMAT_VERSION})")
    encoding = doc.get("encoding")
    extras = encoding.get("extra_features", ()) if isinstance(encoding, dict) else ()
    if "features" not in doc:
        raise DeepShareError(f"policy checkpoint {path}: not a DeepShare policy file (no features)")
    if not isinstance(extras, (list, tuple)) or doc["features"] != list(FEATURES) + list(extras):
        raise DeepShareError(f"policy checkpoint {path}: trained on other features than this version encodes")
    return doc


def _check_archive(data: bytes, path: str | Path, limit: int) -> None:
    """Refuse a policy file whose zip entries are compressed or would unpack to more than
    ``limit`` bytes (``torch.save`` stores entries as they are, and torch inflates compressed
    ones, so a 2 MB file of deflated zeros unpacked to a 2 GiB tensor, about 1,000x, before any
    check could look at it), or whose entries fail their CRC (a corrupted copy)."""
    import io
    import zipfile

    if not zipfile.is_zipfile(io.BytesIO(data)):
        return  # not torch's archive format: torch refuses it, or reads it as a plain pickle
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, OSError):
        raise DeepShareError(f"policy checkpoint {path}: not a DeepShare policy file (a damaged archive)") from None
    entries = archive.infolist()
    packed = [e.filename for e in entries if e.compress_type != zipfile.ZIP_STORED]
    if packed:
        raise DeepShareError(f"policy checkpoint {path}: refused: archive entries are compressed ({shown(packed[0])}); "
                             "torch.save stores them as they are")
    if sum(e.file_size for e in entries) > limit:
        raise DeepShareError(f"policy checkpoint {path}: refused: its entries unpack to more than {limit:,} bytes")
    try:  # stored entries: reading them back checks each CRC (torch does not, so a flipped byte loaded)
        damaged = archive.testzip()
    except (zipfile.BadZipFile, ValueError, OSError, EOFError):
        damaged = "?"
    if damaged is not None:
        raise DeepShareError(f"policy checkpoint {path}: not a DeepShare policy file (a damaged archive: "
                             f"entry {shown(damaged)} fails its checksum)")


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
    if isinstance(hidden, bool) or not isinstance(hidden, int) or not 1 <= hidden <= MAX_HIDDEN:
        raise DeepShareError(f"policy checkpoint {path}: hidden: expected an integer in 1..{MAX_HIDDEN}, got {shown(hidden)}")
    if not isinstance(metadata, dict):
        raise DeepShareError(f"policy checkpoint {path}: metadata: expected a mapping, got {type(metadata).__name__}")
    try:
        metadata = plain(metadata)  # plain data whatever the file held: /v1/policy and the card show it
    except DeepShareError as exc:
        raise DeepShareError(f"policy checkpoint {path}: {exc}") from None
    expected = scorer_shapes(len(encoding.features), hidden)  # before building a network of that size
    given = {name: tuple(getattr(tensor, "shape", ())) for name, tensor in weights.items()} if isinstance(weights, dict) else None
    if given is not None and not all(isinstance(t, torch.Tensor) and t.is_floating_point() for t in weights.values()):
        raise DeepShareError(f"policy checkpoint {path}: state_dict: expected real floating-point tensors")
    if given != expected:
        raise DeepShareError(
            f"policy checkpoint {path}: state_dict: expected the weights of a {len(encoding.features)}-feature, "
            f"{hidden}-wide scorer ({_shapes(expected)}), got {_shapes(given) if given is not None else type(weights).__name__}"
        )
    net = CandidateScorer(len(encoding.features), hidden)
    try:
        net.load_state_dict(weights)
    except (RuntimeError, TypeError) as exc:  # e.g. a tensor of another dtype torch cannot copy
        raise DeepShareError(f"policy checkpoint {path}: state_dict: {str(exc).strip().splitlines()[0]}") from None
    for name, tensor in net.state_dict().items():  # as float32: a float64 1e300 turns inf in the copy
        if not bool(torch.isfinite(tensor).all()):
            raise DeepShareError(f"policy checkpoint {path}: state_dict: {name} holds NaN or infinite weights "
                                 "(every score would be NaN or infinite, and decisions meaningless)")
    net.eval()
    scorer = TorchScorer(net)
    if not _scores_finite(scorer, len(encoding.features)):
        raise DeepShareError(f"policy checkpoint {path}: state_dict: the weights overflow (a row of zeros or ones "
                             "scores NaN or infinite: every score would be, and decisions meaningless)")
    return scorer, encoding, metadata


def _scores_finite(scorer: Any, features: int) -> bool:
    """Whether rows of zeros and of ones (every feature's scale is about 1) score finite numbers:
    finite weights of 1e30 or 3e38 overflow float32 in the first layer."""
    import numpy as np

    rows = np.stack([np.zeros(features, dtype=np.float32), np.ones(features, dtype=np.float32)])
    scores = np.asarray(scorer({"observations": rows, "action_mask": np.ones(2, dtype=np.float32)}))
    return bool(np.isfinite(scores).all())


def scorer_shapes(features: int, hidden: int) -> dict[str, tuple[int, ...]]:
    """The parameter shapes of a :class:`~deepshare.policies.scorer_net.CandidateScorer` of that
    size, by state-dict name, without building one."""
    return {"trunk.0.weight": (hidden, features), "trunk.0.bias": (hidden,), "trunk.2.weight": (hidden, hidden),
            "trunk.2.bias": (hidden,), "head.weight": (1, hidden), "head.bias": (1,)}


def _shapes(shapes: dict[str, tuple[int, ...]]) -> str:
    return ", ".join(f"{name} {list(shape)}" for name, shape in shapes.items()) or "nothing"


def _encoding(given: Any, path: str | Path) -> EncodingConfig:
    """A file's encoding section as a config; a bad key or value (a hand-edited or foreign file)
    is a DeepShareError naming the file, not a traceback."""
    if not isinstance(given, dict):
        raise DeepShareError(f"policy checkpoint {path}: encoding: expected a mapping, got {type(given).__name__}")
    known = {f.name for f in fields(EncodingConfig)}
    unknown = sorted(str(k) for k in given if k not in known)
    if unknown:
        raise DeepShareError(f"policy checkpoint {path}: encoding: unknown key {shown(unknown[0])}; expected some of "
                             f"{', '.join(sorted(known))}")
    if isinstance(given.get("max_wait_s"), bool):  # True would wait 1 s
        raise DeepShareError(f"policy checkpoint {path}: encoding: max_wait_s: expected seconds or None, got {given['max_wait_s']}")
    for key, value in given.items():  # plain data only: a tensor failed with a RuntimeError, or was kept as one
        items = value if isinstance(value, (list, tuple)) else (value,)
        odd = next((item for item in items if item is not None and type(item) not in (str, int, float, bool)), None)
        if odd is not None:
            raise DeepShareError(f"policy checkpoint {path}: encoding: {key}: expected a number, a name or a list of "
                                 f"names, got {type(odd).__name__}")
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


DEFAULT_FILES: dict[str, str] = {"rl-base": SHIPPED_BASE, "rl-hybrid": SHIPPED, "rl-hybrid-preempt": SHIPPED_PREEMPT}
"""The shipped file each learned name loads without ``NAME=PATH``: the one table the factories
(:func:`learned_policy`, :func:`~deepshare.policies.hybrid_preempt.preemptive_hybrid`) and the
policy cards' ``loaded_by`` check (:func:`~deepshare.policies.policy_card.loaded_by_problems`) read."""


def shipped(name: str = SHIPPED) -> Path:
    return Path(str(resources.files("deepshare.data") / "policies" / name))


def default_file(name: str) -> Path:
    """The file the registered learned policy ``name`` loads by default (:data:`DEFAULT_FILES`)."""
    return shipped(DEFAULT_FILES[name])


def learned_policy(name: str, path: str | Path | None, hybrid: bool) -> LearnedPolicy:
    """The policy a file's network drives; with ``hybrid`` the safety net's :class:`HybridRules`
    are the file's metadata key ``hybrid_rules`` (``{"min_ratio": .., "utilisation_floor": ..,
    "anchor": [order, placement]}``, any subset) over the defaults, so a network ships with the
    rules it was tuned for; a file without the key gets the defaults."""
    file = Path(path) if path else default_file("rl-hybrid" if hybrid else "rl-base")
    score, encoding, metadata = scorer_from_file(file)
    rules = _hybrid_rules(metadata.get("hybrid_rules"), file) if hybrid else None
    return LearnedPolicy(name, score, encoding, rules, {**metadata, "checkpoint": str(file)})


def _hybrid_rules(given: Any, file: Path) -> HybridRules:
    """The file's ``hybrid_rules`` over the defaults; a bad key or value is a DeepShareError
    naming the file, the key and what was expected (a hand-edited file is user input)."""
    where = f"policy checkpoint {file}: metadata hybrid_rules"
    rules: dict[str, Any] = {}
    for key, value in rule_mapping(given, where, ("min_ratio", "utilisation_floor", "anchor", "anchor_streak")).items():
        if key == "anchor_streak":
            rules[key] = anchor_streak(f"{where}.{key}", value)
        elif key == "anchor":
            if not isinstance(value, (list, tuple)) or not all(isinstance(part, str) for part in value):
                raise DeepShareError(f"{where}.anchor: expected [order, placement], got {shown(value)}")
            try:
                rules[key] = check_anchor(value)
            except ValueError as exc:
                raise DeepShareError(f"{where}.anchor: {exc}") from None
        else:
            rules[key] = rule_number(f"{where}.{key}", value)
            if key == "utilisation_floor" and rules[key] > 1:  # a share: utilisation never exceeds 1
                raise DeepShareError(f"{where}.{key}: expected a share of the GPUs from 0 to 1, got {shown(value)}")
    return HybridRules(**rules)


def rule_mapping(given: Any, where: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """A policy file's rules section (``hybrid_rules``, ``preempt_rules``): a mapping whose keys are
    some of ``keys`` (absent or empty: no rules), else a DeepShareError naming ``where``."""
    if not given:
        return {}
    if not isinstance(given, dict):
        raise DeepShareError(f"{where}: expected a mapping of {', '.join(keys)}; got {shown(given)}")
    unknown = sorted(map(str, set(given) - set(keys)))
    if unknown:
        raise DeepShareError(f"{where}: unknown {shown(unknown)}; expected {', '.join(keys)}")
    return given


def anchor_streak(where: str, value: Any) -> int:
    """A file's ``hybrid_rules.anchor_streak``: a whole number in 1..MAX_ANCHOR_STREAK (an integral
    float, as JSON or a flag may write it, counts), else a DeepShareError naming ``where``."""
    number = _real(value)
    if number is None or number != int(number) or not 1 <= number <= MAX_ANCHOR_STREAK:
        raise DeepShareError(f"{where}: expected a whole number of launches in 1..{MAX_ANCHOR_STREAK}, got {shown(value)}")
    return int(number)


def rule_number(where: str, value: Any) -> float:
    """A rule's threshold from a policy file's metadata: a finite number >= 0, else a
    DeepShareError naming ``where``."""
    number = _real(value)
    if number is None or number < 0:
        raise DeepShareError(f"{where}: expected a number >= 0, got {shown(value)}")
    return number


def _real(value: Any) -> float | None:
    """``value`` as a finite float when it is a number (not a bool) a float holds; else None (an
    integer of 400 digits does not fit a float and is no threshold)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except (OverflowError, ValueError):
        return None
    return number if math.isfinite(number) else None
