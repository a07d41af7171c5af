"""Live autoscaling, locally: the live scheduler on a fake autoscaling Ray cluster.

Isolated: the cluster runs in its own session, temp folder and port, and only the processes of
that session are stopped (never ``ray stop``), so Ray clusters of other tests or people on the
machine are untouched. The pure parts (demand bundles, the bridge, the provider config) are
tested without Ray. Timeouts in the experiment are guards only; no assertion is on time.
"""

from __future__ import annotations

import copy
import re
import tempfile
from pathlib import Path

import pytest

from deepshare.raycluster.demand_bridge import DemandBridge, demand_bundles
from deepshare.raycluster.fake_autoscaling import autoscaling_config
from deepshare.core.errors import DeepShareError
from deepshare.experiments.autoscale_live import DEFAULT_SPEC, LiveJob, install_job_script, run_live_experiment
from deepshare.core.autoscaling import parse_autoscale_spec
from deepshare.infra import raycompat


def test_demand_bundles_cut_queued_and_running_jobs_into_node_sized_chunks():
    jobs = [("queued", 6), ("running", 2), ("finished", 8), ("failed", 1), ("cancelled", 4), ("queued", 4)]
    assert demand_bundles(jobs, 4) == [{"GPU": 4.0}, {"GPU": 4.0}, {"GPU": 2.0}, {"GPU": 2.0}]
    assert demand_bundles([], 4) == []


def test_the_bridge_pushes_only_changes():
    pushed = []
    bridge = DemandBridge(4, pushed.append)
    assert bridge.update([("queued", 4)]) and not bridge.update([("running", 4)])  # same demand
    assert bridge.update([("running", 4), ("queued", 2)]) and bridge.update([])
    assert pushed == [[{"GPU": 4.0}], [{"GPU": 4.0}, {"GPU": 2.0}], []]


def test_a_shortage_is_a_scale_up_latency_only_when_gpus_came_up():
    """Demand above the GPUs alive that ends as jobs end, with no node added, measured nothing."""
    from deepshare.experiments.autoscale_live import _Sampler

    s = _Sampler(t0=0.0)
    s.sample(0.0, gpu_nodes=1, alive_gpus=4, demand_gpus=12)  # short
    s.sample(5.0, gpu_nodes=1, alive_gpus=4, demand_gpus=8)  # a job ended; still short, no node came
    s.sample(9.0, gpu_nodes=1, alive_gpus=4, demand_gpus=4)  # another ended: the demand fits one node
    assert s.latencies == [] and s.self_resolved == 1 and s.unresolved == 0
    s.sample(10.0, gpu_nodes=1, alive_gpus=4, demand_gpus=8)  # short again
    s.sample(16.0, gpu_nodes=2, alive_gpus=8, demand_gpus=8)  # a node came up
    assert s.latencies == [6.0] and s.self_resolved == 1
    s.sample(20.0, gpu_nodes=2, alive_gpus=8, demand_gpus=12)  # short at the end
    assert s.unresolved == 1 and s.latencies == [6.0]


def test_the_fake_provider_config_passes_rays_own_validation():
    prepare_config, validate_config = raycompat.cluster_config_prepare_and_validate()
    spec = parse_autoscale_spec(DEFAULT_SPEC)
    config = autoscaling_config(spec, "127.0.0.1:1234")
    validate_config(prepare_config(copy.deepcopy(config)))
    node = config["available_node_types"]["gpu4"]  # type: ignore[index]
    assert (node["min_workers"], node["max_workers"], node["resources"]["GPU"]) == (1, 3, 4)
    assert node["labels"]["deepshare.io/fabric"] == "pcie"
    assert config["idle_timeout_minutes"] == 0.25


def test_the_fake_provider_config_keeps_the_specs_max_workers():
    # one type of 3 slots, max_workers 2: Ray was told 3 (the slots' sum) and could start a third node
    prepare_config, validate_config = raycompat.cluster_config_prepare_and_validate()
    spec = parse_autoscale_spec("max_workers: 2\nnode_types: {gpu4: {gpus: 4, price_usd_per_hour: 1, min_nodes: 1, max_nodes: 3}}\n")
    config = autoscaling_config(spec, "127.0.0.1:1234")
    validate_config(prepare_config(copy.deepcopy(config)))
    assert config["max_workers"] == 2
    assert autoscaling_config(spec.model_copy(update={"max_workers": 5}), "127.0.0.1:1234")["max_workers"] == 3
    assert autoscaling_config(spec.model_copy(update={"max_workers": None}), "127.0.0.1:1234")["max_workers"] == 3


@pytest.mark.parametrize(("types", "needle"), [
    ("{g: {gpus: 4, price_usd_per_hour: 1, max_nodes: 1, gpu_model: A100 SXM}}",
     "node_types.'g': Ray refuses the node label deepshare.io/gpu-model='A100 SXM'"),
    ("{gpu node: {gpus: 4, price_usd_per_hour: 1, max_nodes: 1}}",
     "node_types.'gpu node': Ray refuses the node label deepshare.io/node-name='gpu node-999999'"),
    ("{" + "g" * 60 + ": {gpus: 4, price_usd_per_hour: 1, max_nodes: 1}}", "Ray refuses the node label deepshare.io/node-name"),
])
def test_a_node_type_ray_would_refuse_at_node_start_is_one_error_naming_it(types, needle):
    """A GPU model with a space, or a type name that cannot start a node label, reached Ray,
    which refused the node when the autoscaler started it: the experiment waited for its timeout."""
    spec = parse_autoscale_spec(f"node_types: {types}\n")
    with pytest.raises(DeepShareError, match=re.escape(needle)):
        autoscaling_config(spec, "127.0.0.1:1234")


def test_label_numbers_are_written_exactly_and_ray_takes_them():
    """``f"{x:g}"`` wrote a NIC of 10^6 Gb/s as ``1e+06`` (Ray refuses '+') and a price of
    12345.678 as ``12345.7``."""
    spec = parse_autoscale_spec("node_types: {g: {gpus: 4, price_usd_per_hour: 12345.678, max_nodes: 1, "
                                "nic_gbps: 1000000, intra_node_gbps: 0.5}}\n")
    labels = autoscaling_config(spec, "127.0.0.1:1234")["available_node_types"]["g"]["labels"]  # type: ignore[index]
    assert labels["deepshare.io/price-usd-per-hour"] == "12345.678"
    assert labels["deepshare.io/nic-gbps"] == "1000000"
    assert labels["deepshare.io/intra-node-gbps"] == "0.5"
    raycompat.node_label_syntax_check()(labels)


def test_a_zero_written_minus_zero_and_a_tiny_price_stay_label_values():
    from deepshare.raycluster.fake_autoscaling import plain_number

    assert plain_number(-0.0) == "0" and plain_number(1e-70) == "1e-70"


ROOT = Path(__file__).resolve().parents[2]


def test_the_example_job_ships_as_package_data_and_the_examples_run_that_one(tmp_path):
    """The experiment runs from an installed package: the job it submits is package data
    (``deepshare/data/jobs/``, listed in pyproject's package-data), the job the examples run too."""
    from examples.jobs import ddp_mlp

    script = install_job_script(tmp_path / "jobs")
    assert script == tmp_path / "jobs" / "ddp_mlp.py"
    assert script.read_bytes() == (ROOT / "deepshare" / "data" / "jobs" / "ddp_mlp.py").read_bytes()
    assert ddp_mlp.main.__code__.co_filename.endswith("deepshare/data/jobs/ddp_mlp.py")
    [line] = [x for x in (ROOT / "pyproject.toml").read_text().splitlines() if x.startswith('"deepshare.data" = ')]
    assert '"jobs/*.py"' in line


def test_the_experiment_needs_no_checkout_and_no_cli_subprocess():
    source = (ROOT / "deepshare" / "experiments" / "autoscale_live.py").read_text()
    assert "parents[" not in source and "examples" not in source.replace("examples/jobs/ddp_mlp.py", "")
    assert "subprocess" not in source and "run_scheduler(" in source


def test_an_unknown_policy_is_refused_before_ray_starts(tmp_path, no_ray):
    with pytest.raises(DeepShareError):
        run_live_experiment(tmp_path, policy="no-such-policy")
    assert not (tmp_path / "ray").exists()


def test_a_node_type_ray_would_refuse_is_refused_before_any_folder_is_made(tmp_path, no_ray):
    spec = parse_autoscale_spec("node_types: {g: {gpus: 4, price_usd_per_hour: 1, max_nodes: 1, gpu_model: A100 SXM}}\n")
    with pytest.raises(DeepShareError, match="Ray refuses the node label deepshare.io/gpu-model"):
        run_live_experiment(tmp_path / "work", spec=spec)
    assert not (tmp_path / "work").exists()


def test_more_nodes_than_this_machine_can_run_are_refused_before_ray_starts(tmp_path, no_ray):
    from deepshare.core.autoscaling.spec import parse_autoscale_spec

    spec = parse_autoscale_spec(DEFAULT_SPEC.replace("max_nodes: 3", "max_nodes: 10000"), "s.yaml")
    with pytest.raises(DeepShareError, match=r"^node_types\.gpu4\.max_nodes: 10000: the live experiment runs every node "
                                             r"as Ray processes on this machine; expected at most 16$"):
        run_live_experiment(tmp_path, spec)
    assert not (tmp_path / "ray").exists()


def test_a_workdir_other_users_can_write_is_refused_before_ray_starts(tmp_path, no_ray):
    """Whoever can write the folder could replace the job script the nodes run or the autoscaling
    config, which names the module Ray loads as its provider."""
    work = tmp_path / "shared"
    work.mkdir()
    work.chmod(0o777)
    with pytest.raises(DeepShareError, match=r"^--workdir .*shared is writable by other users \(mode 0777\), who could "
                                             r"replace the job script or the autoscaling config"):
        run_live_experiment(work)
    assert not (work / "ray").exists()
    fresh = tmp_path / "new" / "work"
    with pytest.raises(DeepShareError):
        run_live_experiment(fresh, policy="no-such-policy")  # refused before the folders are made
    assert not fresh.exists()


def test_the_autoscaling_config_replaces_a_symlink_planted_at_its_name(tmp_path, monkeypatch):
    """It was written through the link (``write_text`` follows one): into whatever file it named."""
    import subprocess

    from deepshare.raycluster.fake_autoscaling import FakeAutoscalingCluster

    victim = tmp_path / "victim.txt"
    victim.write_text("untouched")
    folder = tmp_path / "ray"
    folder.mkdir(mode=0o700)
    (folder / "autoscaling.json").symlink_to(victim)

    class Started:
        pid, returncode = 999_999_999, 0

        def __init__(self, *args, **kwargs):
            pass

        def communicate(self, timeout=None):
            return "", None

    monkeypatch.setattr(subprocess, "Popen", Started)
    cluster = FakeAutoscalingCluster(parse_autoscale_spec(DEFAULT_SPEC, "s.yaml"), folder)
    cluster.start()
    assert victim.read_text() == "untouched"
    written = folder / "autoscaling.json"
    assert not written.is_symlink() and "NamedFakeProvider" in written.read_text()


SMALL_SPEC = """
idle_timeout_s: 6
node_types:
  gpu2: {gpus: 2, fabric: pcie, price_usd_per_hour: 1.0, min_nodes: 1, max_nodes: 3, provisioning_s: 0}
"""


@pytest.mark.slow  # a fake autoscaling Ray cluster
def test_live_scheduler_on_a_fake_autoscaling_cluster_scales_up_runs_everything_and_scales_down():
    pytest.importorskip("torch")
    work = Path(tempfile.mkdtemp(prefix="ds-al-"))  # short: Ray's socket paths must stay < 108 bytes
    spec = parse_autoscale_spec(SMALL_SPEC)
    trace = [LiveJob("a", 2, 0.0, steps=20), LiveJob("b", 2, 0.5, steps=20), LiveJob("c", 1, 1.0, steps=20),
             LiveJob("d", 1, 1.5, steps=20)]  # 6 GPUs on one 2-GPU node at first: two more nodes needed
    report = run_live_experiment(work, spec, trace, scale_down_wait_s=120.0)
    assert [j.state for j in report.jobs] == ["finished"] * 4
    assert report.max_gpu_nodes == 3  # started at the 1 min node, grew to max_nodes for 12 GPUs
    assert report.scale_up_latencies_s and all(x > 0 for x in report.scale_up_latencies_s)
    nodes_used = {n for j in report.jobs for n in j.node_names}
    assert len(nodes_used) == 3 and all(n.startswith("gpu2-") for n in nodes_used)  # named by the provider
    assert report.scale_down_s is not None  # back to the min node after the idle timeout
    assert report.timeline[-1][1:] == (1, 0)
    assert all(j.jct_s is not None and j.queue_s is not None and j.jct_s >= j.queue_s >= 0 for j in report.jobs)
    leftovers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _cmdline_mentions(p, str(work))]
    assert leftovers == []  # everything the experiment started is gone


def _cmdline_mentions(proc: Path, text: str) -> bool:
    try:
        return text in (proc / "cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
