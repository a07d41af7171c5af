"""The live job spec (YAML or JSON): what a user submits to the scheduler, validated by pydantic.

Named ``LiveJobSpec`` to keep it apart from the core's trace-level :class:`~deepshare.core.types.JobSpec`:
a live job also says what to run (a Python callable ``module:function`` or a command), where its
checkpoints live and, optionally, what a scheduler may know of it before it runs: an estimate or
time limit of its run time (``requested_s``), how much work it has (``total_samples``), and who
runs it (``user``, ``vc``) and which recurring job it is (``group``), its tenant ``queue`` and
``priority`` class (``scheduler start --tenants``), and where in the cluster's
fabric it must or should run (``required_level``, ``preferred_level``, ``slice_size`` with
``slice_level``: a :class:`~deepshare.core.fabric.TopologyRequest`). These are self-reported:
a submitter who lies about them changes only its own jobs' predicted lengths (and so their
priority under SRSF-on-estimate and QSSF), as on any cluster that takes user estimates.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated, Any, Optional

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator

from deepshare.core.bounds import MAX_DURATION_S, MAX_JOB_GPUS, MAX_SAMPLES
from deepshare.core.errors import DeepShareError
from deepshare.core.fabric import NO_TOPOLOGY, TopologyRequest
from deepshare.core.files import CONFIG_BYTES, read_input_text, resolved
from deepshare.core.yamlspec import format_validation_error, parse_yaml_model

ENTRYPOINT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*:[A-Za-z_][A-Za-z0-9_]*\Z")
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}\Z")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")

MAX_ARG_CHARS = 4096
"""Longest command element, argument, path or environment value."""
MAX_ARGS = 256
"""Most elements of ``command`` and of ``args`` (each)."""
MAX_ENV = 128
"""Most environment variables."""

Arg = Annotated[str, StringConstraints(max_length=MAX_ARG_CHARS)]
EnvKey = Annotated[str, StringConstraints(min_length=1, max_length=128)]


class LiveJobSpec(BaseModel):
    """One job to run on the cluster. Exactly one of ``entrypoint`` and ``command``.

    Strict, because it arrives over HTTP: no coercion (``true`` or ``"1"`` is not an integer),
    finite numbers only, within :mod:`deepshare.core.bounds` (a year of run time, 10^18 samples),
    every string and list bounded, no NUL bytes (they cannot reach a process's argv or environment).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    name: str = Field(description="short name: letters, digits, '_', '.', '-' (1-63 characters)")
    gpus: int = Field(gt=0, le=4096, description="GPUs the job needs (one worker process per GPU)")
    model: str = Field(min_length=1, max_length=64, description="model class for the contention features, e.g. MobileNetV3")
    entrypoint: Optional[str] = Field(default=None, max_length=256,
                                      description="Python callable 'package.module:function', called with args")
    command: Optional[list[Arg]] = Field(default=None, max_length=MAX_ARGS,
                                         description="a program and its arguments; args are appended")
    args: list[Arg] = Field(default_factory=list, max_length=MAX_ARGS,
                            description="arguments: function(args) or appended to command")
    checkpoint_dir: str = Field(min_length=1, max_length=MAX_ARG_CHARS,
                                description="folder for save_checkpoint/load_checkpoint (shared by all nodes)")
    working_dir: Optional[str] = Field(default=None, min_length=1, max_length=MAX_ARG_CHARS,
                                       description="cwd of the workers and first entry of PYTHONPATH")
    env: dict[EnvKey, Arg] = Field(default_factory=dict, max_length=MAX_ENV,
                                   description="extra environment variables for the workers")
    requested_s: Optional[float] = Field(default=None, gt=0, le=MAX_DURATION_S,
                                         description="estimate or time limit of its isolated run time, seconds "
                                         "(at most a year)")
    expected_duration_s: Optional[float] = Field(default=None, gt=0, le=MAX_DURATION_S,
                                                 description="older name of requested_s")
    total_samples: Optional[float] = Field(default=None, gt=0, le=MAX_SAMPLES,
                                           description="samples to train (with report(samples=...)), at most 1e18")
    user: Optional[str] = Field(default=None, min_length=1, max_length=256, description="who runs it")
    group: Optional[str] = Field(default=None, min_length=1, max_length=256,
                                 description="a recurring job's tag: same script, parameters and data")
    vc: Optional[str] = Field(default=None, min_length=1, max_length=256, description="virtual cluster or team")
    queue: Optional[str] = Field(default=None, min_length=1, max_length=253,
                                 description="its tenant queue (scheduler start --tenants; none: the queue the tenants "
                                 "file's rule gives (queue_from, default_queue; docs/tenants.md), under a tenant's token "
                                 "only when that queue is the tenant's, else the tenant's first queue)")
    priority: Optional[str] = Field(default=None, min_length=1, max_length=253,
                                    description="its priority class in the tenants file (none: the file's default)")
    required_level: Optional[str] = Field(default=None, min_length=1, max_length=256,
                                          description="all its GPUs inside one domain of this fabric level, or it "
                                          "waits (not with preferred_level)")
    preferred_level: Optional[str] = Field(default=None, min_length=1, max_length=256,
                                           description="inside one domain of this fabric level if one has room, "
                                           "else anywhere (not with required_level)")
    slice_size: Optional[int] = Field(default=None, ge=1, le=MAX_JOB_GPUS,
                                      description="its GPUs in slices of this many, each inside one domain of "
                                      "slice_level (gpus a multiple of it; with slice_level)")
    slice_level: Optional[str] = Field(default=None, min_length=1, max_length=256,
                                       description="the fabric level each slice stays inside (with slice_size)")

    @field_validator("model", "checkpoint_dir", "working_dir", "command", "args", "env", "user", "group", "vc",
                     "queue", "priority", "required_level", "preferred_level", "slice_level")
    @classmethod
    def _no_control(cls, v: Any) -> Any:
        values = v if isinstance(v, list) else [*v.keys(), *v.values()] if isinstance(v, dict) else [v]
        for text in values:
            if isinstance(text, str) and "\x00" in text:
                raise ValueError("NUL characters are not allowed")
        return v

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not NAME_RE.match(v):
            raise ValueError("expected 1-63 letters, digits, '_', '.' or '-', starting with a letter or digit")
        return v

    @field_validator("entrypoint")
    @classmethod
    def _entrypoint(cls, v: Optional[str]) -> Optional[str]:
        if v is not None and not ENTRYPOINT_RE.match(v):
            raise ValueError(f"expected 'package.module:function', got {v!r}")
        return v

    @field_validator("command")
    @classmethod
    def _command(cls, v: Optional[list[str]]) -> Optional[list[str]]:
        if v is not None and (not v or not v[0]):
            raise ValueError("expected a non-empty list: program, then its arguments")
        return v

    @field_validator("env")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not ENV_KEY_RE.match(key):
                raise ValueError(f"invalid environment variable name {key[:64]!r}")
        return v

    @model_validator(mode="after")
    def _one_program(self) -> "LiveJobSpec":
        if (self.entrypoint is None) == (self.command is None):
            raise ValueError("give exactly one of entrypoint ('module:function') and command (a list)")
        if self.requested_s is not None and self.expected_duration_s is not None:
            raise ValueError("give requested_s or its older name expected_duration_s, not both")
        problems = TopologyRequest.problems_of(self.required_level, self.preferred_level, self.slice_size,
                                               self.slice_level, gpus=self.gpus)
        if problems:  # the core's rules (the same as the simulator's and the service's)
            raise ValueError("; ".join(p.message for p in problems))
        return self

    @property
    def topology(self) -> TopologyRequest:
        """Its topology request (``NO_TOPOLOGY`` when it asks nothing); the level names are the
        cluster's to check."""
        if self.required_level is None and self.preferred_level is None and self.slice_size is None:
            return NO_TOPOLOGY
        return TopologyRequest(self.required_level, self.preferred_level, self.slice_size, self.slice_level)

    @property
    def estimate_s(self) -> Optional[float]:
        """Its estimate of its isolated run time (``requested_s``, or ``expected_duration_s``)."""
        return self.requested_s if self.requested_s is not None else self.expected_duration_s


def parse_spec_text(text: str, source: str) -> LiveJobSpec:
    """A job spec from YAML or JSON text (JSON is YAML); errors name ``source`` and the field or line."""
    return parse_yaml_model(text, LiveJobSpec, source, "name, gpus, model, entrypoint or command, checkpoint_dir")


def load_spec_file(path: str | Path) -> LiveJobSpec:
    """Read a spec file; relative ``checkpoint_dir`` / ``working_dir`` resolve against its folder.

    Without ``working_dir`` the folder you run ``deepshare submit`` from is used (where
    ``examples.jobs...`` imports resolve).
    """
    p = Path(path)
    text = read_input_text(p, "job spec", CONFIG_BYTES, not_found="cannot read job spec: file not found")  # regular, bounded
    spec = parse_spec_text(text, str(p))
    base = resolved(p).parent
    updates: dict[str, Any] = {"checkpoint_dir": str(resolved(base / spec.checkpoint_dir))}
    updates["working_dir"] = str(resolved(base / spec.working_dir)) if spec.working_dir else str(Path.cwd())
    return spec.model_copy(update=updates)


def spec_from_json(body: Any) -> LiveJobSpec:
    """Validate an already-decoded JSON body; raises DeepShareError naming the field paths."""
    try:
        return LiveJobSpec.model_validate(body)
    except ValidationError as exc:
        raise DeepShareError(format_validation_error(exc)) from None


def spec_json(spec: LiveJobSpec) -> str:
    return json.dumps(spec.model_dump(mode="json"), sort_keys=True)


def job_checkpoint_dir(spec: LiveJobSpec, job_id: str, instance: str | None) -> str:
    """Where job ``job_id`` of the journal ``instance`` keeps its checkpoints:
    ``<checkpoint_dir>/<instance>-<job id>``, so that two submissions of one spec never resume
    from each other, nor two journals' jobs of one id (every journal numbers its jobs from
    ``<name>-1``: a second scheduler on the same storage, or a reset journal, resumed a new job
    from another's checkpoint). ``instance`` None: ``<checkpoint_dir>/<job id>``, the folder of a
    job journalled before checkpoint folders carried the instance
    (:meth:`~deepshare.runtime.runnames.RunNames.checkpoint_dir`)."""
    return str(Path(spec.checkpoint_dir) / (job_id if instance is None else f"{instance}-{job_id}"))
