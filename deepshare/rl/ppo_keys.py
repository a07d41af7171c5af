"""The ``ppo:`` section of a training config: RLlib's own ``PPOConfig.training()`` keys, unchanged.

Whatever the section holds goes to ``PPOConfig().training(**ppo)`` as written, so a key from
RLlib's documentation or another RLlib project works here without translation. The valid keys
are read from the installed RLlib (the parameters of ``PPOConfig.training`` and
``AlgorithmConfig.training``), less those RLlib marks deprecated, those of the old API stack
(this project trains on the new one, where they are ignored or refused) and those that take
Python classes or callables. Values are checked against RLlib's own annotations, plus the
ranges a PPO hyper-parameter must respect (``lr > 0``, ``0 < gamma <= 1``, ..., every number
finite but ``vf_clip_param: .inf``, RLlib's unclipped value loss), the names ``grad_clip_by`` takes, a schedule's form and each of its values (``lr`` and
``entropy_coeff`` as ``[[timestep, value], ...]``) and ``minibatch_size <=
train_batch_size_per_learner``, so a typo, a wrong type or a value RLlib would refuse once Ray
has started fails when the file is read, with one line naming the key, not inside a Ray worker.

Until 0.1.0 DeepShare renamed two keys (``lambda`` for RLlib's ``lambda_``, ``train_batch_size``
for ``train_batch_size_per_learner``) and kept the network width (``hidden``) here; those are
refused with a line saying what to write instead (the shipped configs are migrated).
"""

from __future__ import annotations

import inspect
import math
from functools import lru_cache
from typing import Any, Mapping

from deepshare.core.errors import DeepShareError, shown
from deepshare.infra.raycompat import rllib_deprecated_value

DEFAULTS: dict[str, Any] = {
    "lr": 3e-4, "gamma": 0.999, "lambda_": 0.95, "train_batch_size_per_learner": 4000, "minibatch_size": 500,
    "num_epochs": 4, "entropy_coeff": 0.01, "clip_param": 0.2, "vf_clip_param": 10.0, "vf_loss_coeff": 1.0,
}
"""DeepShare's defaults for keys a config leaves out (RLlib's own defaults for every other key)."""

FORMER_NAMES = {
    "lambda": "RLlib's PPOConfig.training() calls it lambda_; write lambda_",
    "train_batch_size": "RLlib's old-API-stack key, ignored by the new stack this project trains on; "
                        "write train_batch_size_per_learner",
    "hidden": "not a PPOConfig.training() key; the scorer's width is model.hidden",
}
OLD_STACK = {
    "lr_schedule": "lr as [[timestep, value], ...]",
    "entropy_coeff_schedule": "entropy_coeff as [[timestep, value], ...]",
    "model": "the model: section (hidden)",
    "optimizer": "lr (the learner builds its own Adam optimizer; RLlib ignores optimizer there)",
}
NOT_FROM_YAML = frozenset({"learner_class", "learner_connector"})  # Python classes and callables

POSITIVE = ("lr", "train_batch_size_per_learner", "minibatch_size", "num_epochs", "clip_param", "vf_clip_param",
            "grad_clip", "kl_target")
NON_NEGATIVE = ("entropy_coeff", "vf_loss_coeff", "kl_coeff")
UNIT = ("gamma", "lambda_")  # in (0, 1]
SCHEDULED = ("lr", "entropy_coeff")
"""Keys RLlib's new stack also takes as a schedule ``[[timestep, value], ...]`` (PPO's learner
interpolates between the pairs): at least two pairs, timesteps whole numbers from 0 and
non-decreasing (an equal pair makes a step), each value checked as the key's single value is."""
INFINITY_OFF = ("vf_clip_param",)
"""Keys where RLlib takes ``+inf`` as "off": PPO's learner clamps the value loss to
``[0, vf_clip_param]``, so ``vf_clip_param: .inf`` trains with the value loss unclipped. Not
``grad_clip``: under RLlib's default ``grad_clip_by: global_norm`` an infinite clip makes the
coefficient ``inf / inf`` (NaN gradients); its "off" is ``grad_clip: null``."""
NOT_NULL = ("lr", "gamma", "lambda_", "num_epochs", "clip_param", "entropy_coeff", "vf_loss_coeff",
            "train_batch_size_per_learner")
"""Keys RLlib annotates ``Optional`` but uses as numbers (``1 - clip_param``, ``gamma * v``): null
passed its type check and failed in the first learner update, after a sampling pass, or (``lr``)
trained at another rate. Null keeps its RLlib meaning for ``grad_clip`` (no clipping),
``vf_clip_param`` (the value loss unclipped, as ``.inf``) and ``minibatch_size`` (the whole batch);
``kl_coeff`` and ``kl_target`` may be null only with ``use_kl_loss: false`` (:data:`KL_KEYS`)."""
KL_KEYS = ("kl_coeff", "kl_target")
"""Keys RLlib reads (as numbers) only with ``use_kl_loss`` true, its default."""
REFUSED = {("use_gae", False): "RLlib's PPO without GAE needs whole episodes (batch_mode complete_episodes), "
                               "which DeepShare's env runners do not sample; RLlib refuses it once Ray has started",
           ("add_default_connectors_to_learner_pipeline", False):
               "the learner would get no batching and no advantages: the pipeline that replaces the default one "
               "is learner_connector, a Python callable a config file cannot name"}
"""(key, value) pairs RLlib refuses only inside ``validate()``, after Ray has started."""
MOST = {"train_batch_size_per_learner": 10_000_000, "minibatch_size": 10_000_000, "num_epochs": 10_000}
"""Largest values of keys RLlib takes unbounded: a train batch of 10^7 env steps holds about 20 GB
of DeepShare's observations (16 rows x 30 columns of float32 each), and 10,000 passes over every
batch is a run that never ends; 10^12 passed the file and ran the learner out of memory, or
forever, once Ray had started."""
MAX_TIMESTEP = 2**53
"""The last timestep a schedule may name: every env step a run could take, and exact as a float."""
FLOAT32_MAX = 3.4028234663852886e38
"""The largest float32: a larger coefficient (``entropy_coeff: 1e308``) is finite in the file but
infinite in the learner's float32 loss, which made every weight NaN."""
CHOICES = {"grad_clip_by": ("value", "norm", "global_norm")}
"""Keys whose value is one of a few names (RLlib raises on any other inside ``training()``)."""


@lru_cache(maxsize=1)
def training_keys() -> dict[str, Any]:
    """Every key the ``ppo:`` section accepts, with RLlib's annotation for it."""
    from ray.rllib.algorithms.algorithm_config import AlgorithmConfig
    from ray.rllib.algorithms.ppo import PPOConfig

    DEPRECATED_VALUE = rllib_deprecated_value()

    keys: dict[str, Any] = {}
    for method in (AlgorithmConfig.training, PPOConfig.training):
        for name, param in inspect.signature(method).parameters.items():
            if name == "self" or param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            deprecated = isinstance(param.default, int) and param.default == DEPRECATED_VALUE
            if deprecated or name in NOT_FROM_YAML or name in OLD_STACK or name in FORMER_NAMES:
                keys.pop(name, None)
                continue
            keys[name] = param.annotation
    return keys


def check_ppo(section: Any, source: str) -> dict[str, Any]:
    """The ``ppo:`` section checked key by key, with DeepShare's defaults filled in."""
    if section is None:
        section = {}
    if not isinstance(section, Mapping):
        raise DeepShareError(f"{source}: ppo: expected a mapping of RLlib PPOConfig.training() keys, got {type(section).__name__}")
    valid = training_keys()
    out = dict(DEFAULTS)
    for key, value in section.items():
        where = f"{source}: ppo.{key}"
        if key in FORMER_NAMES:
            raise DeepShareError(f"{where}: {FORMER_NAMES[key]}")
        if key in OLD_STACK:
            raise DeepShareError(f"{where}: RLlib's old API stack; on the new stack use {OLD_STACK[key]}")
        if key not in valid:
            raise DeepShareError(f"{where}: not a key of RLlib's PPOConfig.training() (new API stack); valid keys: {', '.join(sorted(valid))}")
        if value is None and key in NOT_NULL:
            raise DeepShareError(f"{where}: expected a number, got null (leave the key out for DeepShare's or RLlib's default)")
        checked = out[key] = _check_value(key, value, valid[key], where)
        if isinstance(checked, bool) and (key, checked) in REFUSED:  # after coercion: `0`, 'off' are false too
            written = str(checked).lower() if isinstance(value, bool) else f"{value!r} (read as {str(checked).lower()})"
            raise DeepShareError(f"{where}: {written}: {REFUSED[key, checked]}")
    if out.get("use_kl_loss", True) is not False:
        for key in KL_KEYS:
            if key in section and section[key] is None:
                raise DeepShareError(f"{source}: ppo.{key}: expected a number, got null (RLlib reads it while "
                                     "use_kl_loss is true, its default; leave the key out for RLlib's default)")
    batch, minibatch = out.get("train_batch_size_per_learner"), out.get("minibatch_size")
    if isinstance(batch, int) and isinstance(minibatch, int) and minibatch > batch:
        default = "" if "minibatch_size" in section else ", DeepShare's default: set ppo.minibatch_size too"
        raise DeepShareError(f"{source}: ppo.minibatch_size: must be <= train_batch_size_per_learner ({batch}), got "
                             f"{minibatch} (a minibatch is a slice of the train batch{default})")
    return out


def _check_value(key: str, value: Any, annotation: Any, where: str) -> Any:
    from pydantic import TypeAdapter, ValidationError

    if key in SCHEDULED and isinstance(value, (list, tuple)):
        return _check_schedule(key, value, where)
    if key in CHOICES and value not in CHOICES[key]:
        raise DeepShareError(f"{where}: expected one of {', '.join(CHOICES[key])}, got {value!r}")
    if annotation is not inspect.Parameter.empty:
        try:
            adapter = TypeAdapter(annotation)
        except Exception:  # noqa: BLE001 - an annotation pydantic cannot build: leave the value to RLlib
            adapter = None
        if adapter is not None:
            try:
                value = adapter.validate_python(value)
            except ValidationError as exc:
                reason = exc.errors()[0]["msg"]
                raise DeepShareError(f"{where}: {reason} (RLlib's type: {_type_name(annotation)}), got {value!r}") from None
    _check_number(key, value, where)
    return value


def _check_number(key: str, value: Any, where: str) -> None:
    """A number's range for ``key`` (a single value or one of a schedule's); any float finite,
    except ``+inf`` for a key of ``INFINITY_OFF`` (RLlib's "no clipping")."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if key in INFINITY_OFF and value == math.inf:
            return
        if isinstance(value, float) and not math.isfinite(value):  # an int is finite (and may not fit a float)
            hint = " (grad_clip: null turns gradient clipping off)" if key == "grad_clip" else ""
            raise DeepShareError(f"{where}: must be a finite number{hint}, got {value!r}")
        if key in POSITIVE and not value > 0:
            raise DeepShareError(f"{where}: must be > 0, got {value!r}")
        if key in NON_NEGATIVE and not value >= 0:
            raise DeepShareError(f"{where}: must be >= 0, got {value!r}")
        if key in UNIT and not 0 < value <= 1:
            raise DeepShareError(f"{where}: must be in (0, 1], got {value!r}")
        if key in MOST and value > MOST[key]:
            raise DeepShareError(f"{where}: must be at most {MOST[key]:,}, got {shown(value)}")
        if abs(value) > FLOAT32_MAX:
            raise DeepShareError(f"{where}: must be at most {FLOAT32_MAX:.4g} in size (the learner's float32 loss "
                                 f"would hold infinity), got {value!r}")


def _as_number(value: Any) -> int | float | None:
    """``value`` as a number, coerced as a single value of the key is (pydantic's float): PyYAML
    reads ``3e-4`` and ``1e6`` (no dot) as strings, and a schedule written that way is as valid as
    the scalar ``lr: 3e-4``. None for anything that is not a number (a bool, a word)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, str):
        from pydantic import TypeAdapter, ValidationError

        try:
            return TypeAdapter(float).validate_python(value)  # exactly the scalar's coercion (ASCII digits only)
        except ValidationError:
            return None
    return None


def _check_schedule(key: str, schedule: Any, where: str) -> list[list[Any]]:
    """``[[timestep, value], ...]`` checked as RLlib's ``Scheduler.validate`` would check it in the
    driver after Ray started (two pairs or more, the first at timestep 0), plus whole timesteps in
    order (RLlib's ``PiecewiseSchedule`` asserts them sorted; two equal ones make a step, e.g.
    ``[[0, a], [1000, a], [1000, b]]``) and each value's range: one line naming the key and the pair, when the file is read.
    Numbers written as strings (``3e-4``, ``1e6``: PyYAML's reading of e-notation without a dot)
    are coerced as the scalar's are; a whole float timestep (``1e6``) becomes an int."""
    form = "a schedule [[timestep, value], ...] of 2 or more pairs from timestep 0, e.g. [[0, 0.001], [1000000, 0.0001]]"
    if len(schedule) < 2:
        single = " (a constant is a number, not a list)" if len(schedule) == 1 else ""
        raise DeepShareError(f"{where}: expected a number or {form}{single}, got {list(schedule)!r}")
    out: list[list[Any]] = []
    for i, pair in enumerate(schedule):
        numbers = [_as_number(v) for v in pair] if isinstance(pair, (list, tuple)) and len(pair) == 2 else None
        if numbers is None or None in numbers:
            raise DeepShareError(f"{where}[{i}]: expected a pair [timestep, value] of numbers, got {pair!r}")
        step, value = numbers
        whole = isinstance(step, int) or float(step).is_integer()  # float() of a 400-digit int overflows
        if not (whole and 0 <= step <= MAX_TIMESTEP):
            raise DeepShareError(f"{where}[{i}]: the timestep must be a whole number from 0 to {MAX_TIMESTEP:,}, "
                                 f"got {shown(step)}")
        if i == 0 and step != 0:
            raise DeepShareError(f"{where}[0]: a schedule starts at timestep 0 (its value is the initial one), got {step!r}")
        if out and step < out[-1][0]:
            raise DeepShareError(f"{where}[{i}]: timesteps must not decrease, got {step!r} after {out[-1][0]!r}")
        _check_number(key, value, f"{where}[{i}]")
        out.append([int(step), value])
    return out


def _type_name(annotation: Any) -> str:
    return str(annotation).replace("typing.", "")
