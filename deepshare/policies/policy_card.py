"""Policy cards: what a learned policy file ships, written down next to its weights.

A card is a small YAML file beside a policy file (``rl_est_ppo.pt`` -> ``rl_est_ppo.card.yaml``)
that says, for a reader and for ``deepshare policies``: the registered names that load the file,
what it is (the network alone, with its safety net, or with preemption too), the heuristic the
network imitated (its teacher), how it was trained (config, command, seeds), the information
model it was trained under, the commit it was exported at, the rules it carries (exactly the
file's metadata ``hybrid_rules``, ``preemptive`` and ``preempt_rules``), and its suite figures.
``deepshare export-policy`` writes the weights and the card together; every shipped file in
``deepshare/data/policies/`` has one. A card is user input: a missing or misspelt field, a
wrong type or an unknown key is one :class:`~deepshare.core.errors.DeepShareError` line naming
the file and the field. A policy file without a card (one a user trained, an old export) loads
as before; it simply has no card.

The card names its weights' SHA-256, so a card and a weights file that are out of step (one
replaced without the other, a hand edit of the weights) are found by :func:`check_card`.
"""

from __future__ import annotations

import hashlib
import math
import re
import sys
from pathlib import Path
from typing import Annotated, Any, Literal, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field, StrictInt, ValidationError, field_validator, model_validator

from deepshare.core.bounds import MAX_DURATION_S, MAX_ENV_RUNNERS, MAX_TRAIN_ITERATIONS, MAX_TRAIN_SEED
from deepshare.core.errors import DeepShareError, shown
from deepshare.core.information import MAX_ESTIMATE_ERROR
from deepshare.core.names import BEYOND_C0, CONTROL_CHARACTERS_SAID, has_control_character
from deepshare.policies.learned import MAX_ANCHOR_STREAK

CARD_FORMAT = 1
CARD_SUFFIX = ".card.yaml"

Kind = Literal["network", "hybrid", "hybrid-preempt"]
KINDS: dict[str, str] = {
    "network": "the network alone",
    "hybrid": "the network with its safety net",
    "hybrid-preempt": "the network with its safety net, deferring to a preemptive heuristic when it preempts",
}
"""What each kind of card means, in words."""

KIND_LOADER: dict[str, str] = {"network": "rl-base", "hybrid": "rl-hybrid", "hybrid-preempt": "rl-hybrid-preempt"}
"""The registered name that loads a file as its kind says (``NAME=PATH`` for a user's file):
``rl-base`` ignores a file's rules, ``rl-hybrid`` applies ``hybrid_rules``, ``rl-hybrid-preempt``
applies them all."""

LOADERS = tuple(KIND_LOADER.values())
"""The names a card's ``loaded_by`` may list, and ``--card NAME=PATH``'s NAME: the learned policies
that load a policy file (each a shipped one by default, ``checkpoint.DEFAULT_FILES``)."""
LOADERS_SAID = "rl-base, rl-hybrid or rl-hybrid-preempt"

RULE_KEYS = ("hybrid_rules", "preemptive", "preempt_rules")
"""The metadata keys of a policy file that change how it decides; a card copies them exactly."""


_CONTROL = re.compile(rf"[\x00-\x08\x0b-\x1f{BEYOND_C0}]")
"""Control characters but tab and newline, and the bidirectional controls and line separators:
ESC sequences in a card (or the metadata it is made from) would reach the terminal of whoever
runs ``policies --card`` or ``export-policy``, and a right-to-left override or a U+2028 would
show a card's text as something it does not say."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, strict=True)
    """Strict: a seed of ``'0'`` or a YAML ``!!binary`` text is refused, not converted."""

    @field_validator("*", mode="after")
    @classmethod
    def _printable(cls, value: Any) -> Any:
        """Every text of a card (in lists and mappings too) free of control characters."""
        for text in _texts(value):
            if _CONTROL.search(text):
                raise ValueError(f"control characters are not allowed in a card, got {text[:80]!r}")
        return value


def _texts(value: Any) -> list[str]:
    """The strings in ``value`` (itself, or in its lists and mappings, keys included; not in models,
    which check their own)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _texts(v)]
    if isinstance(value, dict):
        return [t for k, v in value.items() for t in (*_texts(k), *_texts(v))]
    return []


class HybridRulesCard(_Strict):
    """A file's ``hybrid_rules``: the safety net's thresholds and fallback (absent keys: defaults)."""

    min_ratio: float | None = Field(default=None, ge=0)
    utilisation_floor: float | None = Field(default=None, ge=0, le=1)
    """A share of the cluster's GPUs: utilisation never exceeds 1, so a floor above 1 would make the
    safety net fire on every decision, which no one means."""
    anchor: list[str] | None = None
    anchor_streak: StrictInt | None = Field(default=None, ge=1, le=MAX_ANCHOR_STREAK)

    @field_validator("anchor")
    @classmethod
    def _anchor(cls, value: list[str] | None) -> list[str] | None:
        if value is not None:
            from deepshare.policies.anchor import check_anchor

            check_anchor(value)
        return value


class PreemptRulesCard(_Strict):
    """A file's ``preempt_rules``: gates on deferring to the preemptive heuristic."""

    min_gain: float | None = Field(default=None, ge=0)
    min_pressure: float | None = Field(default=None, ge=0)


class Rules(_Strict):
    """Exactly the file's rule keys; None where the file has none."""

    hybrid_rules: HybridRulesCard | None = None
    preemptive: str | None = None
    preempt_rules: PreemptRulesCard | None = None

    @field_validator("preemptive")
    @classmethod
    def _preemptive(cls, value: str | None) -> str | None:
        if value is not None:
            from deepshare.policies.hybrid_preempt import preemptive_heuristic

            try:
                preemptive_heuristic(value, "card")
            except DeepShareError:
                raise ValueError(f"expected a preemptive heuristic ORDER+PLACEMENT+preempt, got {value!r}") from None
        return value

    def as_metadata(self) -> dict[str, Any]:
        """The rule keys as a policy file's metadata holds them (absent keys left out)."""
        out: dict[str, Any] = {}
        if self.hybrid_rules is not None:
            out["hybrid_rules"] = self.hybrid_rules.model_dump(exclude_none=True)
        if self.preemptive is not None:
            out["preemptive"] = self.preemptive
        if self.preempt_rules is not None:
            out["preempt_rules"] = self.preempt_rules.model_dump(exclude_none=True)
        return out


class Training(_Strict):
    """How the network was made."""

    method: str = Field(min_length=1)
    """In words: imitation, PPO (and from what), iterations or rounds."""
    config: str | None = None
    """The training YAML (a path relative to the repository)."""
    command: str = Field(min_length=1)
    """The command that trained it."""
    seed: int | None = Field(default=None, ge=0)
    """The shipped file's training seed (no seed flag takes a negative one)."""
    seeds_tried: list[int] = Field(default_factory=list)
    """Every seed of this recipe that was run (for the spread); the shipped one among them."""
    init_from: str | None = None
    """The policy file the training started from, if any."""


class Information(_Strict):
    """What the network was trained to know: the information model of its episodes."""

    durations: list[Literal["exact", "estimated", "unknown"]] = Field(min_length=1)
    """The models episodes drew from (one each; a list repeats a model to weight it)."""
    estimate_errors: list[float] = Field(default_factory=list)
    """Lognormal sigmas of the estimates under ``estimated``."""
    extra_features: list[str] = Field(default_factory=list)
    """The encoding's optional columns the network reads."""
    offer_order: str | None = None
    """How queued jobs are offered (None: ``srsf``)."""
    note: str | None = None

    def describe(self) -> str:
        """``estimated 3/4, unknown 1/4 (sigma 0.7, 1, 1.4)``."""
        n = len(self.durations)
        parts = [m if self.durations.count(m) == n else f"{m} {self.durations.count(m)}/{n}"
                 for m in dict.fromkeys(self.durations)]
        sigma = f" (sigma {', '.join(f'{s:g}' for s in self.estimate_errors)})" if self.estimate_errors and "estimated" in self.durations else ""
        return ", ".join(parts) + sigma


class SuiteFigures(_Strict):
    """One suite's figures for the policy: average JCT over each cell's best heuristic."""

    geomean_avg_jct_ratio: float = Field(gt=0)
    worst_avg_jct_ratio: float | None = Field(default=None, gt=0)
    worst_p99_jct_ratio: float | None = Field(default=None, gt=0)
    cells_won: int | None = Field(default=None, ge=0)
    cells: int | None = Field(default=None, ge=1)
    by_durations: dict[Literal["exact", "estimated", "unknown"], Annotated[float, Field(gt=0)]] = Field(default_factory=dict)
    """Geometric mean per information model, where the suite ran several."""
    against: str = Field(min_length=1)
    """What the ratios are against (which heuristics, which information)."""
    measured: str = Field(min_length=1)
    """The run: its command, date and commit."""
    source: str = Field(min_length=1)
    """Where the figures are kept (a results JSON, a changelog section)."""

    @model_validator(mode="after")
    def _won_of_cells(self) -> "SuiteFigures":
        if self.cells_won is not None and self.cells is not None and self.cells_won > self.cells:
            raise ValueError(f"cells_won: {self.cells_won} cells won of {self.cells} cells")
        return self

    def headline(self) -> str:
        worst = f" (worst cell {self.worst_avg_jct_ratio:.3f})" if self.worst_avg_jct_ratio is not None else ""
        return f"{self.geomean_avg_jct_ratio:.3f}x the best heuristic{worst}"


class PolicyCard(_Strict):
    """What a policy file ships (module docstring)."""

    card: Literal[1]
    """The card format."""
    weights: str = Field(min_length=1)
    """The weights file's name (the card lies in the same folder): a bare name, not a path."""
    weights_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    loaded_by: list[str] = Field(default_factory=list)
    """Registered names that load this file by default ([] : only as ``NAME=PATH``)."""
    kind: Kind
    summary: str = Field(min_length=1)
    """What it is, in a sentence."""
    teacher: str | None
    """The heuristic the network imitated (directly, or in the run it started from); None: none."""
    training: Training
    information: Information
    commit: str | None = Field(pattern=r"^[0-9a-f]{7,40}$")
    """The commit it was exported at; None when not recorded (then ``commit_note`` says why)."""
    commit_dirty: bool = False
    """The export ran with uncommitted changes to tracked files."""
    commit_note: str | None = None
    rules: Rules
    figures: dict[str, SuiteFigures]
    """Suite name -> figures, headline suite first; {} when none were measured (``figures_note``)."""
    figures_note: str | None = None
    notes: str | None = None

    @field_validator("card", mode="before")
    @classmethod
    def _format(cls, value: Any) -> Any:
        """The integer 1 only: a Literal takes ``true`` and ``1.0`` as equal to 1."""
        if type(value) is not int:  # YAML's true, not Python's True
            got = str(value).lower() if isinstance(value, bool) else shown(value)
            raise ValueError(f"expected card format {CARD_FORMAT}, got {got}")
        return value

    @field_validator("teacher")
    @classmethod
    def _registered_teacher(cls, value: str | None) -> str | None:
        if value is not None and not _CONTROL.search(value):  # control characters: refused as in any text
            problem = teacher_problem(value)
            if problem:
                raise ValueError(problem)
        return value

    @field_validator("weights")
    @classmethod
    def _bare_name(cls, value: str) -> str:
        if value in (".", "..") or "/" in value or "\\" in value:
            raise ValueError(f"expected the weights file's bare name (it lies beside the card), got {value[:80]!r}")
        if has_control_character(value):  # a card's other texts keep tab and newline; a file name does not
            raise ValueError(f"expected a file name without {CONTROL_CHARACTERS_SAID}, got {value[:80]!r}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "PolicyCard":
        if self.commit is None and not self.commit_note:
            raise ValueError("commit_note: required when commit is null (say why no commit is recorded)")
        if not self.figures and not self.figures_note:
            raise ValueError("figures_note: required when figures is empty (say why none were measured)")
        if self.kind == "network" and self.rules.as_metadata():
            raise ValueError("rules: a network-alone card carries no rules (rl-base ignores them); kind should be hybrid")
        if self.kind == "hybrid" and (self.rules.preemptive is not None or self.rules.preempt_rules is not None):
            raise ValueError("rules: preemptive and preempt_rules belong to a hybrid-preempt card")
        if self.kind == "hybrid-preempt" and self.rules.preemptive is None:
            raise ValueError("rules.preemptive: a hybrid-preempt card names the heuristic it defers to")
        for name in self.loaded_by:
            if name in KIND_LOADER.values() and name != KIND_LOADER[self.kind]:
                raise ValueError(f"loaded_by: {name} does not load a file as {self.kind} ({KIND_LOADER[self.kind]} does)")
        if self.training.seed is not None and self.training.seeds_tried and self.training.seed not in self.training.seeds_tried:
            raise ValueError("training.seeds_tried: must include training.seed")
        return self

    @property
    def safety_net_off(self) -> bool:
        """The file's safety net can never fire: no predicted ratio exceeds 1, no utilisation is below 0."""
        rules = self.rules.hybrid_rules
        return rules is not None and (rules.min_ratio or 0) > 1 and rules.utilisation_floor is not None and rules.utilisation_floor <= 0

    def what(self) -> str:
        """The kind in words, with this card's rules."""
        if self.kind == "network":
            return KINDS["network"]
        net = "safety net off (its rules never fire)" if self.safety_net_off else f"safety net falling back to {self.anchor()}"
        text = f"network + {net}"
        if self.kind == "hybrid-preempt":
            gates = self.rules.preempt_rules.model_dump(exclude_none=True) if self.rules.preempt_rules else {}
            gate = ", gated " + ", ".join(f"{k} {v:g}" for k, v in gates.items()) if gates else ""
            text += f" + preemption ({self.rules.preemptive}{gate})"
        return text

    def anchor(self) -> str:
        from deepshare.policies.learned import HybridRules

        given = self.rules.hybrid_rules.anchor if self.rules.hybrid_rules else None
        return "+".join(given or HybridRules().anchor)

    def headline(self) -> str:
        """The first suite's figure, or the note saying why there is none."""
        if not self.figures:
            return f"no suite figures ({self.figures_note})"
        suite, figures = next(iter(self.figures.items()))
        return f"{suite}: {figures.headline()}"

    def facts(self) -> str:
        """The key facts on one line (``deepshare policies``)."""
        teacher = f"teacher {self.teacher}" if self.teacher else "no teacher"
        commit = f"commit {self.commit[:12]}" + (" (dirty)" if self.commit_dirty else "") if self.commit else "commit not recorded"
        return (f"{self.weights}: {self.what()}; {teacher}; trained under {self.information.describe()}; "
                f"{commit}; {self.headline()}")


CANDIDATES = re.compile(r"^(?P<spec>.*) \(candidates (?P<names>.*)\)$", re.DOTALL)
"""An expert-iteration teacher as ``deepshare imitate --teacher`` records it (its ``imitates``):
the planner's spec with ``--teacher-candidates`` appended, ``planner=4 (candidates A,B)``."""


def teacher_problem(teacher: str) -> str | None:
    """Why ``teacher`` names no teacher a file can have (None: it does): a registered heuristic,
    by its exact name as ``export-policy --teacher`` takes it, or the rollout planner an
    expert-iteration run recorded (its spec, with ``(candidates A,B)`` when it had some), checked
    as ``imitate --teacher`` checks it. A card is a file anyone may hand over: a name that is not
    one of the package's own (``module:Attr``, a plugin's entry point) is refused unloaded, so that
    reading a card imports nothing."""
    from deepshare.policies import policy_info
    from deepshare.policies.registry import is_builtin
    from deepshare.policies.teacher_spec import parse_teacher

    if teacher.partition("=")[0].strip() == "planner":
        found = CANDIDATES.match(teacher)
        try:
            parse_teacher(found["spec"], found["names"]) if found else parse_teacher(teacher)
        except DeepShareError as exc:
            return f"expected a registered heuristic or an expert-iteration planner, got {shown(teacher)} ({exc})"
        return None
    try:
        info = policy_info(teacher) if is_builtin(teacher) else None
    except DeepShareError:
        info = None
    if info is None or not info.heuristic or info.name != teacher:
        return f"expected a registered heuristic (`deepshare policies` lists them) or null, got {shown(teacher)}"
    return None


def card_path(weights: str | Path) -> Path:
    """Where the card of ``weights`` lies: ``NAME.pt`` -> ``NAME.card.yaml`` in the same folder."""
    p = Path(weights)
    return p.with_name(p.name[: -len(p.suffix)] + CARD_SUFFIX if p.suffix else p.name + CARD_SUFFIX)


def sha256_of(path: str | Path) -> str:
    from deepshare.core.files import POLICY_BYTES, read_input_bytes

    return hashlib.sha256(read_input_bytes(path, "policy file", POLICY_BYTES)).hexdigest()


EXPECTED = "card, weights, weights_sha256, kind, summary, teacher, training, information, commit, rules, figures"


def parse_card(text: str, source: str) -> PolicyCard:
    """A card from YAML text; errors are one line naming ``source`` and the field."""
    from deepshare.core.documents import load_yaml

    raw = load_yaml(text, source, f"a mapping with {EXPECTED}")
    if not isinstance(raw, dict):
        raise DeepShareError(f"{source}: expected a mapping with {EXPECTED}, got {type(raw).__name__}")
    return validate_card(raw, source)


def validate_card(raw: Mapping[str, Any], source: str) -> PolicyCard:
    """``raw`` as a card; a problem is one :class:`DeepShareError` line: ``SOURCE: FIELD: what``."""
    try:
        return PolicyCard.model_validate(raw)
    except ValidationError as exc:
        raise DeepShareError(f"{source}: {card_problems(exc)}") from None


def card_problems(exc: Any) -> str:
    """A pydantic ValidationError as ``field.path: message`` clauses; a check of the whole card
    names its field in its message."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(x) for x in err["loc"])
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "literal_error" and loc == "card":
            msg = f"expected card format {CARD_FORMAT}, got {err.get('input')!r}"
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)


def read_card(path: str | Path) -> PolicyCard:
    from deepshare.core.yamlspec import read_config_text

    return parse_card(read_config_text(path, "policy card"), str(path))


def shipped_folder() -> Path:
    """The folder of the shipped policy files and their cards."""
    from importlib import resources

    return Path(str(resources.files("deepshare.data") / "policies"))


def shipped_cards() -> list[tuple[Path, PolicyCard | DeepShareError]]:
    """Each shipped card file with its card, or the error that reading it gave."""
    found: list[tuple[Path, PolicyCard | DeepShareError]] = []
    for path in sorted(shipped_folder().glob("*" + CARD_SUFFIX)):
        try:
            found.append((path, read_card(path)))
        except DeepShareError as exc:
            found.append((path, exc))
    return found


def card_of(weights: str | Path) -> PolicyCard | None:
    """The card beside ``weights``, or None when it has none (a user's file, an old export)."""
    path = card_path(weights)
    return read_card(path) if path.exists() else None


def card_yaml(card: PolicyCard) -> str:
    """The card as the YAML text written beside the weights (fields in the model's order)."""
    import yaml

    doc = card.model_dump(mode="json", exclude_none=False)
    doc["rules"] = {key: card.rules.as_metadata().get(key) for key in RULE_KEYS}
    for name, figures in card.figures.items():
        doc["figures"][name] = figures.model_dump(mode="json", exclude_none=True)
    header = ("# Policy card: what the policy file beside it ships (deepshare/policies/policy_card.py).\n"
              "# `deepshare export-policy` writes it with the weights; `deepshare policies --card` shows it and checks\n"
              "# it against them.\n")
    return header + yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=120)


CHECKED = ("name and sha256; loaded_by against the files the registry loads; from the file's metadata, where it records them: rules, information (durations, "
           "estimate_errors, extra_features, offer_order), training (seed, config, init_from, method) and teacher "
           "(its imitates)")
"""What :func:`check_card` compares, in words (``policies --card`` says it): the training command,
the summary, the notes and the figures are not compared (a command may be written by hand)."""


def check_card(card: PolicyCard, weights: str | Path, metadata: Mapping[str, Any] | None = None,
               encoding: Any = None) -> list[str]:
    """What does not match between ``card`` and the weights file beside it (empty: they agree):
    its name, its SHA-256 and, with ``metadata`` (the file's, loaded), its rules, the information
    model it was trained under, how it was trained (seed, config, init_from, the method with its
    iteration or round count) and its teacher (the metadata's ``imitates``, which ``deepshare
    imitate`` records), wherever the metadata records them; with ``encoding`` (the file's, a
    mapping or an ``EncodingConfig``) also the extra columns and the offer order
    (:data:`CHECKED`). The hash alone does not tie the card's text to the file: a card edited to
    claim another information model or seed would still match it. The training command, summary,
    notes and figures are not compared. Its ``loaded_by`` is compared with the files the registry
    loads (:func:`loaded_by_problems`)."""
    problems = []
    if Path(weights).name != card.weights:
        problems.append(f"weights: the card describes {card.weights}, not {Path(weights).name}")
    sha = sha256_of(weights)
    if sha != card.weights_sha256:
        problems.append(f"weights_sha256: {Path(weights).name} has sha256 {sha[:12]}..., the card {card.weights_sha256[:12]}...")
    problems += loaded_by_problems(card, weights)
    if metadata is not None:
        given = {key: metadata[key] for key in RULE_KEYS if metadata.get(key) not in (None, {})}
        if _plain_rules(given) != _plain_rules(card.rules.as_metadata()):
            problems.append(f"rules: the card says {card.rules.as_metadata()}, the file's metadata {given}")
        problems += _information_problems(card, metadata, encoding) + _training_problems(card, metadata)
        imitates = metadata.get("imitates")
        if isinstance(imitates, str) and imitates and card.teacher != imitates:
            problems.append(f"teacher: the card says {shown(card.teacher)}, the file's metadata imitates {shown(imitates)}")
    return problems


def loaded_by_problems(card: PolicyCard, weights: str | Path) -> list[str]:
    """Where ``card.loaded_by`` disagrees with what the registry loads (``checkpoint.DEFAULT_FILES``):
    a listed name whose default file is another file (by name, or by SHA-256: other weights under
    the card's file name) or cannot be read, and a name whose default file is ``weights`` itself
    that the card leaves out (the card of a shipped file a name loads lists that name), and any
    other name (a card an earlier ``export-policy`` wrote with ``--loaded-by planner`` or a
    plugin's name still reads: it is out of step, and no name is looked up). A copy of a shipped
    file and its card elsewhere agrees: the name loads those very weights."""
    from deepshare.core.files import same_file
    from deepshare.policies.checkpoint import DEFAULT_FILES, default_file

    problems = []
    for i, name in enumerate(card.loaded_by):
        if name in card.loaded_by[:i]:
            problems.append(f"loaded_by: {shown(name)} is listed twice")
            continue
        if name not in DEFAULT_FILES:  # an earlier export-policy wrote planner or a plugin's name: the card still reads
            problems.append(f"loaded_by: {shown(name)} loads no shipped file by default (expected {LOADERS_SAID})")
            continue
        file = default_file(name)
        if file.name != card.weights:
            problems.append(f"loaded_by: {name} loads {file.name} by default, not {card.weights}")
            continue
        try:
            sha = sha256_of(file)
        except DeepShareError as exc:
            problems.append(f"loaded_by: {name} loads {file.name} by default, which cannot be read ({exc})")
            continue
        if sha != card.weights_sha256:
            problems.append(f"loaded_by: {name} loads a {file.name} with sha256 {sha[:12]}..., "
                            f"not the card's {card.weights_sha256[:12]}...")
    for name in DEFAULT_FILES:
        if name not in card.loaded_by and same_file(weights, default_file(name)):
            problems.append(f"loaded_by: {name} loads {Path(weights).name} by default; the card does not list it")
    return problems


def loader_problems(card: PolicyCard, name: str) -> list[str]:
    """Why ``name`` (one of :data:`LOADERS`) loading the card's file would not make the policy the
    card describes (empty: it would): each name loads a file as one kind (:data:`KIND_LOADER`);
    rl-base ignores the rules of a hybrid file, rl-hybrid adds a default safety net to a network
    alone and ignores a file's preemption, rl-hybrid-preempt adds a default preemptive heuristic."""
    as_kind = {loader: kind for kind, loader in KIND_LOADER.items()}[name]
    if card.kind == as_kind:
        return []
    return [f"kind: {name} loads a file as {as_kind} ({KINDS[as_kind]}), but the card's file is {card.kind} "
            f"({KINDS[card.kind]}); load it as {KIND_LOADER[card.kind]}"]


def _information_problems(card: PolicyCard, metadata: Mapping[str, Any], encoding: Any) -> list[str]:
    """The card's ``information`` against what the file's metadata (and encoding) say."""
    enc = encoding if isinstance(encoding, Mapping) or encoding is None else {
        "extra_features": getattr(encoding, "extra_features", ()), "offer_order": getattr(encoding, "offer_order", None)}
    try:
        info = information_of(metadata, enc or {})
    except DeepShareError as exc:
        return [f"information: the file's metadata cannot say ({exc})"]
    except ValidationError as exc:  # a text no card may hold (a control character in an extra column's name)
        return [f"information: the file's metadata cannot say ({card_problems(exc)})"]
    ours = card.information
    compared = [("durations", ours.durations, info.durations), ("estimate_errors", ours.estimate_errors, info.estimate_errors)]
    if enc is not None:
        compared += [("extra_features", ours.extra_features, info.extra_features),
                     ("offer_order", ours.offer_order or "srsf", info.offer_order or "srsf")]
    return [f"information.{name}: the card says {shown(card_value)}, the file's metadata {shown(file_value)}"
            for name, card_value, file_value in compared if _plain_rules(card_value) != _plain_rules(file_value)]


def _training_problems(card: PolicyCard, metadata: Mapping[str, Any]) -> list[str]:
    """The card's ``training`` against the metadata ``train`` / ``imitate`` wrote, field by field
    where the metadata has it."""
    try:
        derived = training_of(metadata, command="-")
    except ValidationError as exc:  # a text no card may hold (a control character in the config's path)
        return [f"training: the file's metadata cannot say ({card_problems(exc)})"]
    ours = card.training
    compared = [("seed", ours.seed, derived.seed), ("config", ours.config, derived.config),
                ("init_from", ours.init_from, derived.init_from)]
    if "iterations" in metadata or "dagger_rounds" in metadata:
        compared.append(("method", ours.method, derived.method))
    recorded = {"seed": derived.seed is not None, "config": derived.config is not None, "init_from": True, "method": True}
    return [f"training.{name}: the card says {shown(card_value)}, the file's metadata {shown(file_value)}"
            for name, card_value, file_value in compared if recorded[name] and card_value != file_value]


def _plain_rules(rules: Mapping[str, Any]) -> Any:
    """Rules compared as data: lists and tuples alike, numbers by value."""
    if isinstance(rules, Mapping):
        return {k: _plain_rules(v) for k, v in rules.items()}
    if isinstance(rules, (list, tuple)):
        return [_plain_rules(v) for v in rules]
    return rules


# -- a card from a policy file's metadata ---------------------------------------------------------

def information_of(metadata: Mapping[str, Any], encoding: Mapping[str, Any]) -> Information:
    """The information model a file was trained under, from its metadata ``env`` and its encoding.
    A file whose ``env`` names no ``durations`` predates the information model: its episodes
    showed exact remaining work."""
    env = metadata.get("env") if isinstance(metadata.get("env"), Mapping) else {}
    durations = env.get("durations")
    note = None
    if durations is None:
        durations, note = ["exact"], "the file predates the information model: its episodes showed exact remaining work"
    elif isinstance(durations, str):
        durations = [durations]
    if not isinstance(durations, (list, tuple)) or not durations or \
            not all(d in ("exact", "estimated", "unknown") for d in durations):
        raise DeepShareError(f"metadata env.durations: expected exact, estimated or unknown (or a list of them), "
                             f"got {shown(durations)}")
    errors = env.get("estimate_errors") or []
    if isinstance(errors, (int, float)):
        errors = [errors]
    if not isinstance(errors, (list, tuple)) or not all(
            isinstance(e, (int, float)) and not isinstance(e, bool) and _finite_float(e) and e >= 0 for e in errors):
        raise DeepShareError(f"metadata env.estimate_errors: expected numbers >= 0, got {shown(errors)}")
    return Information(durations=list(durations), estimate_errors=[float(e) for e in errors],
                       extra_features=list(encoding.get("extra_features") or ()),
                       offer_order=encoding.get("offer_order"), note=note)


def training_of(metadata: Mapping[str, Any], command: str | None = None, seeds_tried: Sequence[int] = ()) -> Training:
    """How a file was trained, from the metadata ``deepshare train`` / ``imitate`` wrote; the
    command is rebuilt from it (:func:`training_command`) unless given, so a file whose metadata
    no command reproduces needs ``command``."""
    model = metadata.get("model") if isinstance(metadata.get("model"), Mapping) else {}
    fit = metadata.get("fit") if isinstance(metadata.get("fit"), Mapping) else {}
    config = metadata.get("config")
    init_from = model.get("init_from")
    if _imitation(metadata):
        seed = fit.get("seed")
        rounds = metadata.get("dagger_rounds")
        method = f"imitation of {metadata.get('imitates', 'its anchor')}: behaviour cloning, {rounds} DAgger round(s)"
    else:
        seed = metadata.get("seed")
        iterations = metadata.get("iterations")
        method = f"PPO, {iterations} iterations" + (f", started from {init_from}" if init_from else " from scratch")
    tried = [int(s) for s in seeds_tried] or ([int(seed)] if isinstance(seed, int) else [])
    return Training(method=method, config=str(config) if config is not None else None,
                    command=command or training_command(metadata),
                    seed=seed if isinstance(seed, int) else None, seeds_tried=tried,
                    init_from=str(init_from) if init_from else None)


def _imitation(metadata: Mapping[str, Any]) -> bool:
    """Whether ``deepshare imitate`` (behaviour cloning or expert iteration) wrote ``metadata``."""
    return "imitates" in metadata or str(metadata.get("trainer", "")).startswith("imitation")


GIVE_COMMAND = "give the command that trained it with --training-command"
"""How a refusal of :func:`training_command` ends: what ``export-policy`` needs instead."""

FIT_FLAGS = {"epochs": ("--epochs", int), "batch_size": ("--batch-size", int), "lr": ("--lr", float),
             "held_out": ("--held-out", float), "hidden": ("--hidden", int), "seed": ("--seed", int),
             "label_smoothing": ("--label-smoothing", float)}
"""``deepshare imitate``'s flag for each field of the metadata's ``fit`` (its ``FitSettings``)."""


def training_command(metadata: Mapping[str, Any]) -> str:
    """The ``deepshare train`` / ``imitate`` command that reproduces the file ``metadata``
    describes: its config and a flag, with the recorded value, for every setting the run records
    that the command's flags can set (defaults included, since defaults change). A setting the
    command cannot set (a Ray Tune trial's grid values, a fit field ``imitate`` has no flag for),
    or a file that names no config, is refused with one :class:`DeepShareError` line asking for
    ``--training-command``: a command that would train something else is worse than none."""
    config = metadata.get("config")
    if not isinstance(config, str) or not config:
        raise DeepShareError(f"metadata config: the file names no training config (got {shown(config)}), so no "
                             f"command can be rebuilt from it; {GIVE_COMMAND}")
    if metadata.get("tune") is not None:
        tune = metadata["tune"]
        values = ", ".join(f"{k}={shown(v)}" for k, v in tune.items()) if isinstance(tune, Mapping) else shown(tune)
        raise DeepShareError(f"metadata tune: a Ray Tune trial's grid values ({values}) are no flag of `deepshare "
                             f"train`, so no command rebuilt from the file reproduces it; {GIVE_COMMAND}")
    if _imitation(metadata):
        flags = _imitate_flags(metadata)
        return f"deepshare imitate {_path_word(config)}" + "".join(f" {flag} {value}" for flag, value in flags) + \
            _teacher_flags(metadata)
    flags = _train_flags(metadata)
    command = f"deepshare train {_path_word(config)}" + "".join(f" {flag} {value}" for flag, value in flags)
    if not isinstance(metadata.get("run"), Mapping):
        command += f"  {RUNNERS_NOT_RECORDED}"
    return command


RUNNERS_NOT_RECORDED = "# env runners not recorded: this runs with the config's run.num_env_runners"
"""Ends the rebuilt ``train`` command of a file written before the run recorded its env runners
(a shell comment: the command still runs). The envs draw from streams keyed by (seed, env runner,
env index), so the same seed with another runner count trains on other episodes; such a file
cannot say which count to pass."""


def _train_flags(metadata: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``deepshare train``'s flags for what ``metadata`` records: ``--iterations``, ``--seed``,
    the information model (``--durations``, ``--estimate-error``: the run's ``env`` holds the
    flags' overrides and the config's values alike, and repeating either reproduces it; a list
    of several came from the config, as no flag writes one), ``--init-from`` and
    ``--num-env-runners`` (the run's ``run``: episodes are keyed by env runner, so another count
    trains on other episodes). ``run.envs_per_env_runner`` has no flag: the command's config sets
    it, as it set it for the run."""
    flags = []
    for key, flag in (("iterations", "--iterations"), ("seed", "--seed")):
        if metadata.get(key) is not None:
            flags.append((flag, _train_value(metadata, key, flag, metadata[key], int)))
    env = metadata.get("env") if isinstance(metadata.get("env"), Mapping) else {}
    durations, errors = _one(env.get("durations")), _one(env.get("estimate_errors"))
    if isinstance(durations, str) and durations in ("exact", "estimated", "unknown"):
        flags.append(("--durations", durations))
    if isinstance(errors, (int, float)) and not isinstance(errors, bool) and _finite_float(errors) and errors >= 0:
        flags.append(("--estimate-error", _train_value(metadata, "env.estimate_errors", "--estimate-error", errors, float)))
    model = metadata.get("model") if isinstance(metadata.get("model"), Mapping) else {}
    if model.get("init_from"):
        flags.append(("--init-from", _path_word(str(model["init_from"]))))
    run = metadata.get("run")
    if isinstance(run, Mapping) and run.get("num_env_runners") is not None:
        flags.append(("--num-env-runners", _train_value(metadata, "run.num_env_runners", "--num-env-runners",
                                                        run["num_env_runners"], int)))
    return flags


TRAIN_FLAG_RANGES: dict[str, tuple[float, float]] = {
    "--iterations": (1, MAX_TRAIN_ITERATIONS),
    "--seed": (0, MAX_TRAIN_SEED),
    "--estimate-error": (0, MAX_ESTIMATE_ERROR),  # deepshare.cli.args.estimate_sigma
    "--num-env-runners": (0, MAX_ENV_RUNNERS),  # deepshare.cli.args.runner_count
}
"""The values ``deepshare train``'s flags take (their argparse types in :mod:`deepshare.cli`, which
this layer may not import; a test parses rebuilt commands at each bound with the CLI's parser).
A rebuilt command must run: a file whose metadata records ``iterations: -5`` or ``seed: 2**70``
(a hand edit, another tool) got a card whose command ``train`` refuses."""


def _train_value(metadata: Mapping[str, Any], key: str, flag: str, value: Any, kind: type) -> str:
    """:func:`_number` of a value for ``deepshare train FLAG``, refused when outside the flag's
    :data:`TRAIN_FLAG_RANGES` with one line naming the metadata field and asking for the command."""
    text = _number(metadata, key, value, kind)
    low, high = TRAIN_FLAG_RANGES[flag]
    if not low <= value <= high:
        what = "an integer" if kind is int else "a number"
        span = " to ".join(f"{int(b):,}" if float(b).is_integer() else f"{b:g}" for b in (low, high))
        raise DeepShareError(f"metadata {key}: expected {what} from {span} (as `deepshare train {flag}` takes), "
                             f"got {shown(value)}; {GIVE_COMMAND}")
    return text


def _imitate_flags(metadata: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``deepshare imitate``'s flags for what ``metadata`` records: ``--episodes``,
    ``--seed-base`` (the first of its ``episode_seeds``), ``--dagger-rounds`` and one flag per
    field of its ``fit`` (:data:`FIT_FLAGS`); a ``fit`` field with no flag is refused."""
    flags = []
    if metadata.get("episodes") is not None:
        flags.append(("--episodes", _number(metadata, "episodes", metadata["episodes"], int)))
    seeds = metadata.get("episode_seeds")
    if isinstance(seeds, (list, tuple)) and seeds:
        flags.append(("--seed-base", _number(metadata, "episode_seeds", seeds[0], int)))
    elif seeds is not None:
        raise DeepShareError(f"metadata episode_seeds: expected [first, last], got {shown(seeds)}; {GIVE_COMMAND}")
    if metadata.get("dagger_rounds") is not None:
        flags.append(("--dagger-rounds", _number(metadata, "dagger_rounds", metadata["dagger_rounds"], int)))
    fit = metadata.get("fit")
    if fit is not None and not isinstance(fit, Mapping):
        raise DeepShareError(f"metadata fit: expected a mapping, got {shown(fit)}; {GIVE_COMMAND}")
    unknown = sorted(str(k) for k in (fit or {}) if k not in FIT_FLAGS)
    if unknown:
        raise DeepShareError(f"metadata fit: `deepshare imitate` has no flag for {', '.join(unknown)}, so no command "
                             f"rebuilt from the file reproduces it; {GIVE_COMMAND}")
    for key, (flag, kind) in FIT_FLAGS.items():
        if (fit or {}).get(key) is not None:
            flags.append((flag, _number(metadata, f"fit.{key}", fit[key], kind)))
    return flags


def _one(value: Any) -> Any:
    """The single value of a one-item list (or a bare value); None for a list of several."""
    if isinstance(value, (list, tuple)):
        return value[0] if len(value) == 1 else None
    return value


def _number(metadata: Mapping[str, Any], key: str, value: Any, kind: type) -> str:
    """``value`` written as a flag's argument that parses back to it (a whole number for an
    ``int`` flag, the shortest exact text of a float); anything else is refused."""
    whole = isinstance(value, int) or isinstance(value, float) and value.is_integer()
    # an int beyond a float's range (10**400) is no float flag's value, and math.isfinite raised on it
    if isinstance(value, bool) or not isinstance(value, (int, float)) \
            or not (kind is int and isinstance(value, int) or _finite_float(value)) or kind is int and not whole:
        what = "a whole number" if kind is int else "a number"
        raise DeepShareError(f"metadata {key}: expected {what}, got {shown(value)}; {GIVE_COMMAND}")
    if kind is int:
        return str(int(value))
    text = repr(float(value))
    return text[:-2] if text.endswith(".0") else text


def _quoted(text: str) -> str:
    """``text`` as one shell word (a path with a space stays one argument)."""
    import shlex

    return shlex.quote(text)


def _path_word(path: str) -> str:
    """A recorded path as one shell word that the command reads as a path: a relative one starting
    with ``-`` (``-x.yaml``) gets ``./`` before it, else argparse would take it for an option."""
    return _quoted(f"./{path}" if path.startswith("-") else path)


def _teacher_flags(metadata: Mapping[str, Any]) -> str:
    """`` --teacher SPEC [--teacher-candidates A,B]`` of an expert-iteration run (its metadata has
    the planner's ``teacher_config``; its ``teacher`` is the spec, with the candidates appended).

    The spec and the candidates come from the file, so they are checked with the CLI's own
    teacher parser (:func:`~deepshare.policies.teacher_spec.parse_teacher`, what ``imitate --teacher`` runs)
    and shell-quoted, as the config and ``--init-from`` are: metadata that ``imitate`` would refuse
    (``planner=4;touch x``, a candidate that is not a registered heuristic) is refused with the
    line asking for ``--training-command``, and no metadata puts shell syntax in the card's command."""
    from deepshare.policies.teacher_spec import parse_teacher

    teacher, config = metadata.get("teacher"), metadata.get("teacher_config")
    if not isinstance(teacher, str) or not isinstance(config, Mapping):
        return ""
    spec = _with_horizon(teacher.split(' (candidates ')[0], config)
    candidates = config.get("candidates")
    names = ",".join(str(c) for c in candidates) if isinstance(candidates, (list, tuple)) and candidates else None
    try:
        parse_teacher(spec, names)
    except DeepShareError as exc:
        raise DeepShareError(f"metadata teacher: {exc}; {GIVE_COMMAND}") from None
    flags = f" --teacher {_quoted(spec)}"
    if names is not None:
        flags += f" --teacher-candidates {_quoted(names)}"
    return flags


def _with_horizon(spec: str, config: Mapping[str, Any]) -> str:
    """``spec`` naming the horizon ``config`` ran with when it names none: a spec's default
    horizon has changed (an hour with arrivals, now ``end``), so the rebuilt command must say
    which one the run used."""
    name, _, arg = spec.partition("=")
    parts = arg.split(":") if arg else [""]
    horizon, arrivals = config.get("horizon_s"), config.get("arrivals")
    if len(parts) > 3 and parts[3] or not isinstance(horizon, (int, float)) or isinstance(horizon, bool):
        return spec
    if horizon >= MAX_DURATION_S and arrivals is False:
        token = "end"
    elif isinstance(horizon, int) or math.isfinite(horizon):  # exact (an int beyond a float's range is refused there), as every number of the command (``:g`` kept 6 digits: 1234567 -> 1.23457e+06)
        token = _number(config, "teacher_config.horizon_s", horizon, float)
    else:
        token = repr(float(horizon))
    parts += [""] * (4 - len(parts))
    parts[3] = token
    return f"{name}={':'.join(parts)}"


def summary_of(kind: str, rules: Rules) -> str:
    """The card's one-sentence summary for ``kind`` with ``rules``."""
    from deepshare.policies.hybrid_preempt import DEFAULT_PREEMPTIVE
    from deepshare.policies.learned import HybridRules

    if kind == "network":
        return "The network alone: it makes every decision, waiting included. Load it as rl-base."
    given = rules.hybrid_rules.model_dump(exclude_none=True) if rules.hybrid_rules else {}
    hr = HybridRules(**{k: tuple(v) if k == "anchor" else v for k, v in given.items()})
    net_off = hr.min_ratio > 1 and hr.utilisation_floor <= 0
    net = ("its safety net is off (min_ratio above 1 and utilisation_floor 0: it never fires)" if net_off else
           f"when it waits while a job fits, its safety net launches {'+'.join(hr.anchor)}'s next pick if that pick's "
           f"predicted ratio is at least {hr.min_ratio:g} or utilisation would stay below {hr.utilisation_floor:g}")
    if hr.anchor_streak > 1:
        net += (f"; once the network chooses its encoding's anchor launch (row 1), up to {hr.anchor_streak} of that "
                "heuristic's launches are made without asking the network again")
    if kind == "hybrid":
        return f"The network with its safety net: {net}. Load it as rl-hybrid."
    gates = rules.preempt_rules.model_dump(exclude_none=True) if rules.preempt_rules else {}
    gate = ("within its gates " + ", ".join(f"{k} {v:g}" for k, v in gates.items())) if gates else "with no gate"
    return (f"The network, deferring to {rules.preemptive or DEFAULT_PREEMPTIVE} whenever that heuristic preempts "
            f"({gate}); otherwise {net}. Load it as rl-hybrid-preempt.")


def figures_from_suite(doc: Any, entry: str | None, source: str, preferred: Sequence[str] = ()) -> tuple[str, SuiteFigures]:
    """``(suite name, figures)`` of one learned policy from ``deepshare evaluate --suite --json``
    output: ``entry`` names the policy as the suite listed it; without it, the one of ``preferred``
    the suite ran, else its only learned policy. Errors are one line naming ``source`` and the key
    (a key of the wrong shape too: a list where a mapping belongs, a suite name that is no text)."""
    if not isinstance(doc, Mapping) or not isinstance(doc.get("summary"), Mapping) or not isinstance(doc.get("suite"), Mapping):
        raise DeepShareError(f"{source}: not the JSON of `deepshare evaluate --suite` (no suite and summary)")
    name = doc["suite"].get("name")
    if not isinstance(name, str) or not name.strip():
        raise DeepShareError(f"{source}: suite.name: expected the suite's name, got {shown(name)}")
    summary = doc["summary"]
    if entry is None:
        found = [given for given in preferred if given in summary]
        learned = [given for given in summary if _learned_entry(given)]
        if found:
            entry = found[0]
        elif len(summary) == 1 and len(learned) == 1 and "=" not in learned[0]:  # the suite's only entry
            entry = learned[0]
        else:
            raise DeepShareError(f"{source}: the suite judged {sorted(summary)}, none of them this file by its path; "
                                 "say which with --figures-of (or --loaded-by NAME for a bare name)")
    if entry not in summary:
        raise DeepShareError(f"{source}: no figures for {entry!r}; the suite judged {sorted(summary)}")
    if not _learned_entry(entry):
        raise DeepShareError(f"--figures-of {entry}: a heuristic in {source}; name the learned policy loaded from this file")
    if entry not in preferred and "=" in entry and Path(entry.partition("=")[2]).is_file():  # another file that exists here
        raise DeepShareError(f"--figures-of {entry}: {source} judged another file ({entry.partition('=')[2]}), "
                             "not SRC or --out; its figures are not this file's")
    row = _mapping(summary[entry], f"summary.{entry}", source)
    by_model = _mapping(doc.get("summary_by_durations"), "summary_by_durations", source)
    prov = _mapping(doc.get("provenance"), "provenance", source)
    commit = _mapping(prov.get("commit"), "provenance.commit", source)
    try:
        by_durations = {}
        for model, rows in by_model.items():
            rows = _mapping(rows, f"summary_by_durations.{model}", source)
            if entry in rows:
                by_durations[model] = round(float(_mapping(rows[entry], f"summary_by_durations.{model}.{entry}",
                                                           source)["geomean_avg_jct_ratio"]), 4)
        sha = str(commit.get("sha", ""))[:12] or "an unrecorded commit"
        moved = f"; the checkout was at {str(commit['sha_at_write'])[:12]} when written" if commit.get("sha_at_write") else ""
        measured = (f"deepshare evaluate --suite {name}, {str(prov.get('date', 'undated'))[:10]}, deepshare "
                    f"{prov.get('deepshare', '?')} at {sha}" + (f" (with uncommitted changes{moved})" if commit.get("dirty") else ""))
        figures = SuiteFigures(
            geomean_avg_jct_ratio=round(float(row["geomean_avg_jct_ratio"]), 4),
            worst_avg_jct_ratio=_opt_float(row.get("worst_avg_jct_ratio")),
            worst_p99_jct_ratio=_opt_float(row.get("worst_p99_jct_ratio")),
            cells_won=row.get("cells_won"), cells=row.get("cells"), by_durations=by_durations,
            against="each cell's best heuristic under the same information model",
            measured=measured, source=source,
        )
    except ValidationError as exc:  # a ValueError too: caught first, as its one-line clauses
        raise DeepShareError(f"{source}: summary.{entry}: cannot read its figures ({card_problems(exc)})") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise DeepShareError(f"{source}: summary.{entry}: cannot read its figures ({exc.__class__.__name__}: {exc})") from None
    return name, figures


def _learned_entry(entry: str) -> bool:
    """Whether a suite's summary entry may be a learned policy: not a registered heuristic
    (a challenger), looked up without importing anything (a ``module:Attr`` entry counts)."""
    from deepshare.policies import policy_info
    from deepshare.policies.registry import is_builtin

    base = str(entry).partition("=")[0]
    try:
        if not is_builtin(base):
            return True  # a plugin's policy may load a file
        info = policy_info(base)
    except DeepShareError:
        return True
    return not info.heuristic and info.argument_is_file  # rl-base, rl-hybrid, rl-hybrid-preempt; not the planner


def _mapping(value: Any, key: str, source: str) -> Mapping[str, Any]:
    """``value`` when it is a mapping, {} when absent (None); else one line naming ``source`` and ``key``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DeepShareError(f"{source}: {key}: expected a mapping, got {shown(value)}")
    return value


def _finite_float(value: int | float) -> bool:
    """Whether ``value`` is a finite number a float holds (``math.isfinite`` raised OverflowError
    on an int beyond a float's range, such as ``10**400`` in a hand-edited file's metadata)."""
    return math.isfinite(value) if isinstance(value, float) else abs(value) <= sys.float_info.max


def _opt_float(value: Any) -> float | None:
    if value is None:
        return None
    try:
        out = float(value)
    except OverflowError:
        raise ValueError(f"expected a finite number, got {shown(value)}") from None
    if not math.isfinite(out):
        raise ValueError(f"expected a finite number, got {value!r}")
    return round(out, 4)
