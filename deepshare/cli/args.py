"""What every ``deepshare`` subcommand module shares: flag types, argument groups and checks.

Each flag type converts and checks a flag's text and, when it is wrong, says what was expected
(argparse prints it with the flag's name and exits 2). The argument groups (cluster, trace,
simulation) and the functions that turn parsed flags into a topology, a trace, a contention
model or a simulator config are the same for every command that simulates.
"""

from __future__ import annotations

import argparse
import re
from typing import Any, Callable, Sequence

from deepshare.core.bounds import MAX_ENV_RUNNERS, MAX_GENERATED_JOBS, MAX_ROUND_S, MAX_TRAIN_ITERATIONS, MIN_OFFERED_LOAD
from deepshare.core.contention import CONTENTION_MODELS, ContentionModel, make_contention
from deepshare.core.errors import DeepShareError, one_line
from deepshare.core.information import (
    CONTENTION_KNOWLEDGE, DEFAULT_CONTENTION_KNOWLEDGE, DEFAULT_DURATIONS, DEFAULT_ESTIMATE_ERROR, DURATIONS,
    MAX_ESTIMATE_ERROR, InformationModel,
)
from deepshare.core.simulator import SimConfig
from deepshare.core.topology import Topology, load_topology, preset_names, uniform
from deepshare.core.traces import FORMATS, MIX_PRESETS, Trace, load, mix_from_spec
from deepshare.core.written import INTEGER_TEXT, NUMBER_TEXT


INTEGER = re.compile(rf"\s*{INTEGER_TEXT}\s*")
"""An integer as a flag writes it (:data:`_WRITTEN`)."""

_WRITTEN = {
    int: INTEGER,
    float: re.compile(rf"\s*{NUMBER_TEXT}\s*", re.IGNORECASE),
}
"""How a flag's integer or number is written (:mod:`deepshare.core.written`), spaces around it
allowed as ``int`` and ``float`` allow them."""


def number(convert: Callable[[str], float], ok: Callable[[float], bool], expected: str) -> Callable[[str], Any]:
    """An argparse ``type=`` that converts and checks a flag's value, naming what was expected."""
    written = _WRITTEN.get(convert)

    def parse(text: str) -> float:
        try:
            if written is not None and not written.fullmatch(text):
                raise ValueError(text)
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        if not ok(value):
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
        return value

    return parse


def bind_host(text: str) -> str:
    """``--host``: an address to bind, never empty (an empty host binds every interface, as
    ``0.0.0.0`` does, which a typo or an unset variable must not do silently); an IPv6 address
    written as a URL writes it, ``[::1]``, is taken without its brackets (``serve --host [::1]``
    could not bind: "Name or service not known")."""
    inner = text[1:-1] if text.startswith("[") and text.endswith("]") else text
    if not inner.strip():  # "[$HOST]" with the variable unset bound every interface too
        raise argparse.ArgumentTypeError("an empty host binds every interface; give 127.0.0.1 (this machine) "
                                         "or the address to serve on (0.0.0.0: every interface)")
    if "[" in inner or "]" in inner:  # [::1]:8470, a lone [: "cannot bind", after a warning that it is exposed
        raise argparse.ArgumentTypeError(f"{text!r} is not an address: give it alone, an IPv6 one with or without "
                                         "its brackets (::1 or [::1]), and the port with its own flag")
    return inner


def host_header_name(text: str) -> str:
    """``--metrics-allowed-host``: a name a ``Host`` header can give (1-253 printable
    characters, no spaces or ``/``: :func:`deepshare.core.hosts.is_host_name`)."""
    from deepshare.core.hosts import is_host_name

    if not is_host_name(text):
        raise argparse.ArgumentTypeError(f"expected a host name (1-253 printable characters, no spaces or '/'), got {text!r}")
    return text


def in_range(convert: Callable[[str], float], low: float, high: float, unit: str = "", *, low_open: bool = False) -> Callable[[str], Any]:
    """A bounded ``type=``: the value must lie in ``[low, high]`` (``(low, high]`` with ``low_open``).

    Bounds keep absurd values (``1e308`` seconds, ``1e-300`` jobs/s, a billion nodes) from
    reaching the library, where they would overflow, never finish or exhaust memory; the error
    names the accepted range.
    """
    kind = "an integer" if convert is int else "a number"
    span = f"above {_plain(low)} and at most {_plain(high)}" if low_open else f"from {_plain(low)} to {_plain(high)}"
    expected = f"{kind} {span}{' ' + unit if unit else ''}"
    return number(convert, lambda v: (low < v if low_open else low <= v) and v <= high, expected)


def _plain(value: float) -> str:
    """``10,000,000`` rather than ``1e+07``; ``1e-09`` stays as it is."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


positive_float = number(float, lambda v: 0 < v < float("inf"), "a positive number")
non_negative_float = number(float, lambda v: 0 <= v < float("inf"), "a number >= 0")
positive_int = number(int, lambda v: v > 0, "a positive integer")
non_negative_int = number(int, lambda v: v >= 0, "a non-negative integer")
port_number = number(int, lambda v: 0 <= v <= 65535, "a port number 0..65535 (0: any free port)")
listen_port = number(int, lambda v: 1 <= v <= 65535, "a port number 1..65535")


def print_line(out: Any, text: str) -> None:
    """One line (or a document's lines) to a rich console: no markup, no highlighting, no
    wrapping, and every control character but the line breaks written as its escape
    (:func:`~deepshare.core.errors.one_line`), so text from a server, a file or a job's log
    (an escape sequence, a carriage return, a bidi override) cannot drive the terminal; rich
    itself strips only a few of them."""
    if not text.isprintable():
        text = "\n".join(map(one_line, text.split("\n")))
    out.print(text, markup=False, highlight=False, soft_wrap=True)


# Bounded flags of the simulator-side commands (the ranges are in each flag's error message).
round_seconds = in_range(float, 1, MAX_ROUND_S, "seconds")
overhead_seconds = in_range(float, 0, 1e6, "seconds")
node_count = in_range(int, 1, 65_536, "nodes")
gpus_per_node = in_range(int, 1, 1024, "GPUs")
job_count = in_range(int, 1, MAX_GENERATED_JOBS, "jobs")
arrival_rate = in_range(float, 1e-9, 1e6, "jobs/s")
offered_load = in_range(float, MIN_OFFERED_LOAD, 100)
duration_seconds = in_range(float, 1, 1e9, "seconds")
duration_sigma = in_range(float, 0, 5)
estimate_sigma = in_range(float, 0, MAX_ESTIMATE_ERROR, "(a lognormal sigma)")
perturb_spread = in_range(float, 0, 0.95, "(each model's sensitivity drawn within 1 +- S)")
seed_value = in_range(int, 0, 2**63 - 1)
seed_count = in_range(int, 1, 1000, "seeds")
fold_count = in_range(int, 2, 100, "folds")
start_count = in_range(int, 1, 100, "starts")
worker_count = in_range(int, 1, 256, "processes")
iteration_count = in_range(int, 1, MAX_TRAIN_ITERATIONS, "iterations")
runner_count = in_range(int, 0, MAX_ENV_RUNNERS, "env runners")
wait_seconds = in_range(float, 0, 1e7, "seconds")


# -- shared argument groups and what they build ------------------------------------------------
def flagged(flag: str, parse: Callable[[str], object], text: str):  # type: ignore[no-untyped-def]
    """``parse(text)``, with the flag's name put in front of any error that does not start with it."""
    try:
        return parse(text)
    except DeepShareError as exc:
        message = str(exc)
        raise DeepShareError(message if message.startswith(f"{flag}:") else f"{flag}: {message}") from None


def policy_list(text: str) -> list[str]:
    """``--policies A,B,...`` as checked registry names; an item holding a comma (a policy file's
    path) is quoted as in CSV: ``fifo+packed,"rl-base=runs/a,b/policy.pt"``; each policy at most
    once: the same text twice, or two spellings of one policy and argument (``rl-base`` and
    ``rl-base=`` its shipped file, ``planner`` and ``planner=8``, ``a.pt`` and ``./a.pt``), would run
    it twice. Two policies that only report under one name (``planner=2,planner=4``) are kept:
    the command then labels each with its name as typed (:func:`result_labels`)."""
    import csv

    try:
        rows = list(csv.reader([text], skipinitialspace=True, strict=True))
    except csv.Error as exc:
        raise DeepShareError(f"--policies {text!r}: expected comma-separated policy names, an item holding a "
                             f"comma in double quotes ({exc})") from None
    names = [n.strip() for row in rows for n in row if n.strip()]
    if not names:
        raise DeepShareError(f"--policies {text!r}: expected comma-separated policy names")
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:  # it would run twice and keep one result under its name
        raise DeepShareError(f"--policies: {', '.join(repeated)} listed more than once")
    from deepshare.policies import make_policy

    seen: dict[object, str] = {}
    for name in names:
        key = _same_policy_key(name, flagged("--policies", make_policy, name))
        if key in seen:
            raise DeepShareError(f"--policies: {seen[key]} and {name} are the same policy with the same argument; "
                                 "list it once")
        seen[key] = name
    return names


def _same_policy_key(name: str, policy: object) -> tuple[object, ...]:
    """:func:`~deepshare.policies.registry.policy_identity`: what makes two spellings one policy."""
    from deepshare.policies.registry import policy_identity

    return policy_identity(name, policy)


def result_labels(names: Sequence[str], reported: Sequence[str]) -> list[str]:
    """The label of each policy's result: the name it reports (``rl-base=a.pt`` as ``rl-base``),
    or, when two report under one name (``planner=2,planner=4``), each name as typed, as
    ``evaluate`` labels them: one result never replaces another."""
    return list(reported) if len(set(reported)) == len(reported) else list(names)


def check_policies(names: Sequence[str], flag: str) -> list[str]:
    """Build each policy once so an unknown name fails before any trace is read; the names the
    built policies report under (``rl-base=a.pt`` reports as ``rl-base``)."""
    from deepshare.policies import make_policy

    return [flagged(flag, make_policy, name).name for name in names]


def add_cluster_args(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("cluster (a preset or YAML, or a uniform testbed-type cluster)")
    g.add_argument("--cluster", metavar="PRESET|YAML", help=f"preset ({', '.join(preset_names())}) or spec file; default testbed")
    g.add_argument("--nodes", type=node_count, metavar="N", help="uniform cluster of N testbed-type nodes")
    g.add_argument("--gpus-per-node", type=gpus_per_node, metavar="G", help="GPUs per node with --nodes (default 8)")


def add_trace_args(p: argparse.ArgumentParser, required: bool = True, seed: bool = True) -> None:
    p.add_argument("--trace", required=required, metavar="PATH", help="trace file (format detected from its content)")
    p.add_argument("--format", choices=FORMATS, help="force the trace format")
    p.add_argument(
        "--mix", default="random", metavar="PRESET|MODEL:W,...",
        help=f"model mix for traces without model names ({', '.join(MIX_PRESETS)} or a custom list); default random",
    )
    if seed:
        p.add_argument("--seed", type=seed_value, default=0, help="seed for model assignment (default 0)")


def add_sim_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--contention", choices=sorted(CONTENTION_MODELS), default="profiled",
                   help="profiled (measured pairwise table), link (bandwidth sharing on links) or none; default profiled")
    p.add_argument("--link-params", metavar="JSON", help="with --contention link: parameters from `deepshare calibrate --out`")
    g = p.add_argument_group("the simulated world's contention, when it should differ from the model the scheduler knows")
    g.add_argument("--perturb-contention", type=perturb_spread, metavar="S",
                   help="run the simulation on the contention model with each model's sensitivity drawn within "
                   "[1-S, 1+S] of the shipped one (seeded by --perturb-seed); the policies still start from the shipped model")
    g.add_argument("--perturb-seed", type=seed_value, metavar="N", help="seed of --perturb-contention (default 0)")
    g.add_argument("--true-params", metavar="JSON",
                   help="with --contention link: run the simulation on these link parameters (a `deepshare calibrate --out` "
                   "file) while the policies start from the shipped ones (or --link-params)")
    p.add_argument("--round-s", type=round_seconds, metavar="S", help="extra decision points every S seconds (original: 300)")
    p.add_argument("--preempt-overhead-s", type=overhead_seconds, default=SimConfig.preempt_overhead_s, metavar="S",
                   help=f"restore time after a preemption (default {SimConfig.preempt_overhead_s:g})")
    p.add_argument("--migrate-overhead-s", type=overhead_seconds, default=SimConfig.migrate_overhead_s, metavar="S",
                   help=f"checkpoint+restore time of a migration (default {SimConfig.migrate_overhead_s:g})")
    add_information_args(p)
    p.add_argument("--no-progress", action="store_true", help="never show a progress bar")


def add_information_args(p: argparse.ArgumentParser, history: bool = True) -> None:
    """The run's information model: what the policies may know of job lengths."""
    g = p.add_argument_group("what the policies know (information model)")
    g.add_argument("--durations", choices=DURATIONS, default=DEFAULT_DURATIONS,
                   help="exact: the true remaining work (the artifact's oracle); estimated: each job's estimate "
                   "(the trace's requested_s, else a seeded lognormal draw around the truth); unknown: no estimate. "
                   f"Default {DEFAULT_DURATIONS}: what the service and the live scheduler give a policy")
    g.add_argument("--estimate-error", type=estimate_sigma, metavar="SIGMA",
                   help=f"with --durations estimated: lognormal sigma of the drawn estimates (default {DEFAULT_ESTIMATE_ERROR:g}, "
                   "close to the Helios predictor's error); drawn with the run's --seed")
    g.add_argument("--contention-knowledge", choices=CONTENTION_KNOWLEDGE, default=DEFAULT_CONTENTION_KNOWLEDGE,
                   help="exact: predictions from the simulation's own contention model (the artifact's oracle); learned: from a "
                   "model fitted online to the running jobs' measured throughputs, starting from the shipped parameters "
                   f"(deepshare/core/contention/learned.py). Default {DEFAULT_CONTENTION_KNOWLEDGE}")
    if history:
        g.add_argument("--history", metavar="TRACE",
                       help="past finished jobs (any trace format; their durations as run times) that history-based "
                       "orders (gittins, qssf) learn from before the trace's own jobs finish")


def cluster_topology(args: argparse.Namespace) -> Topology:
    if args.cluster is not None and not args.cluster.strip():  # an unset variable, not a wish for the default
        raise DeepShareError(f"--cluster {args.cluster!r}: expected a preset ({', '.join(preset_names())}) or a cluster "
                             "spec file; leave the flag out for testbed")
    if args.cluster and args.nodes:
        raise DeepShareError("give either --cluster or --nodes/--gpus-per-node, not both")
    if args.gpus_per_node and not args.nodes:
        raise DeepShareError("--gpus-per-node needs --nodes")
    if args.nodes:
        return uniform(args.nodes, args.gpus_per_node or 8)
    return load_topology(args.cluster or "testbed")


def load_trace(args: argparse.Namespace) -> Trace:
    return load(args.trace, format=args.format, mix=flagged("--mix", mix_from_spec, args.mix), seed=args.seed)


def prior_model(args: argparse.Namespace) -> ContentionModel:
    """The contention model the policies know (``--contention``, ``--link-params``): the shipped
    one they start from under ``--contention-knowledge learned``."""
    if args.link_params is None:
        return make_contention(args.contention)
    if args.contention != "link":
        raise DeepShareError("--link-params needs --contention link")
    from deepshare.core.contention.link import load_link_catalog

    return make_contention("link", link_catalog=flagged("--link-params", load_link_catalog, args.link_params))


def contention_model(args: argparse.Namespace) -> ContentionModel:
    """The model the simulation runs: the known one, perturbed (``--perturb-contention``) or
    replaced by true parameters (``--true-params``)."""
    known = prior_model(args)
    perturb, true_params = getattr(args, "perturb_contention", None), getattr(args, "true_params", None)
    if perturb is None and getattr(args, "perturb_seed", None) is not None:  # it would be dropped silently
        raise DeepShareError("--perturb-seed goes with --perturb-contention: it seeds the perturbed world's draw")
    if perturb is not None and true_params is not None:
        raise DeepShareError("give at most one of --perturb-contention and --true-params")
    if perturb is not None:
        from deepshare.core.contention.world import PerturbedContention

        seed = args.perturb_seed if args.perturb_seed is not None else 0
        return flagged("--perturb-contention", lambda s: PerturbedContention(known, s, seed), perturb)
    if true_params is not None:
        if args.contention != "link":
            raise DeepShareError("--true-params needs --contention link")
        from deepshare.core.contention.link import load_link_catalog
        from deepshare.core.contention.world import KnownWorld

        world = make_contention("link", link_catalog=flagged("--true-params", load_link_catalog, true_params))
        return KnownWorld(world, known)
    return known


def information_model(args: argparse.Namespace, seed: int = 0, jobs: Sequence[Any] = ()) -> InformationModel:
    """The run's information model from ``--durations``, ``--estimate-error`` and
    ``--contention-knowledge``, drawing its estimates (and measurement noise) with ``seed``; an
    ``--estimate-error`` the durations do not draw with is refused (the run and its record dropped
    it), and so is one for a trace whose ``jobs`` all carry ``requested_s`` (their own estimates:
    nothing is drawn, yet the record kept the sigma)."""
    sigma = getattr(args, "estimate_error", None)
    if sigma is not None and args.durations != "estimated":
        raise DeepShareError(f"--estimate-error goes with --durations estimated: --durations {args.durations} draws "
                             "no estimates")
    if sigma is not None and jobs and all(job.requested_s is not None for job in jobs):
        raise DeepShareError("--estimate-error: every job of the trace has its own estimate (requested_s), so no "
                             "estimate is drawn; leave the flag out")
    return InformationModel(args.durations, DEFAULT_ESTIMATE_ERROR if sigma is None else sigma, seed,
                            contention_knowledge=getattr(args, "contention_knowledge", DEFAULT_CONTENTION_KNOWLEDGE))


def past_history(args: argparse.Namespace, jobs: Sequence[Any] = ()):  # type: ignore[no-untyped-def]
    """``--history TRACE`` as a :class:`~deepshare.core.history.JobHistory`, or None. The history
    is what finished before the trace: the ``--trace`` file itself, or one holding any of its
    ``jobs`` (same id, submit time, model, GPUs and work), is refused, since it told the policies each
    job's true run time under ``--durations estimated`` or ``unknown``."""
    if getattr(args, "history", None) is None:
        return None
    from deepshare.core.files import same_file
    from deepshare.core.history import history_from_jobs

    trace_path = getattr(args, "trace", None)
    if trace_path and same_file(trace_path, args.history):
        raise DeepShareError(f"--history {args.history}: is the --trace; a history holds jobs that finished before the "
                             "trace's, not its own (they would tell the policies each job's true run time)")
    trace = flagged("--history", lambda path: load(path, format=None, mix=flagged("--mix", mix_from_spec, args.mix)), args.history)
    own = {_job_identity(job) for job in jobs}
    repeated = next((job for job in trace.jobs if _job_identity(job) in own), None) if own else None
    if repeated is not None:
        raise DeepShareError(f"--history {args.history}: job {repeated.job_id!r} is a job of the trace (same id, submit "
                             "time, model, GPUs and work); a history holds jobs that finished before the trace's")
    return flagged(f"--history {args.history}", history_from_jobs, trace.jobs)


def _job_identity(job: Any) -> tuple[object, ...]:
    """What makes a history row the trace's own job: its id, submit time, model, GPUs and work
    (generated traces of two seeds share ids, submit times and sizes; their models differ)."""
    return job.job_id, job.submit_time, job.model, job.gpus, job.duration_s, job.total_samples


def add_tenants_arg(p: argparse.ArgumentParser) -> None:
    """``--tenants FILE``: queues, quotas and priorities (``docs/tenants.md``)."""
    p.add_argument("--tenants", metavar="FILE",
                   help="tenants file (YAML: queues with GPU quotas, cohorts, weights, priority classes; docs/tenants.md): "
                   "every policy runs behind its admission and quota preemption, and fairness per queue is reported")


def tenants_of(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """``--tenants FILE`` as :class:`~deepshare.tenants.Tenants`, or None."""
    if getattr(args, "tenants", None) is None:
        return None
    from deepshare.tenants import load_tenants

    return load_tenants(args.tenants)


def sim_config(args: argparse.Namespace) -> SimConfig:
    return SimConfig(
        round_s=args.round_s,
        preempt_overhead_s=args.preempt_overhead_s,
        migrate_overhead_s=args.migrate_overhead_s,
    )


def policy_files(names: Sequence[str]) -> list[str]:
    """The checkpoint files named by ``NAME=PATH`` policies (inputs no output may overwrite; the
    planner's ``planner=8`` names none, even beside a file named 8)."""
    from deepshare.policies.registry import argument_file

    return [path for name in names if (path := argument_file(name)) is not None]


def sim_inputs(args: argparse.Namespace, policies: Sequence[str] = ()) -> dict[str, object]:
    """Every input file of a simulating command, by flag (for :func:`check_outputs`)."""
    return {
        "--trace": args.trace,
        "--cluster": getattr(args, "cluster", None) or None,  # '': cluster_topology names the presets
        "--link-params": getattr(args, "link_params", None),
        "--true-params": getattr(args, "true_params", None),
        "--history": getattr(args, "history", None),
        "--tenants": getattr(args, "tenants", None),
        "--config": getattr(args, "config", None),
        "--policy": policy_files(policies),
    }
