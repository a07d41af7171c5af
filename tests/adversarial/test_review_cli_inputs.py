"""Review of the CLI's file inputs: each test reproduces one confirmed defect (it fails on the code
as reviewed and passes once the defect is fixed). The rule they hold the code to: a bad input file
gives one ``deepshare: error:`` line naming the field or line, never a traceback, a hang,
unbounded memory or CPU, or a changed meaning of the input.

Inputs that could hang or exhaust memory on the code as reviewed run in a child process with a
timeout and an address-space limit, so a failing test fails in seconds and never takes the
machine down.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from cli_run import cli, one_error_line
from deepshare.core.errors import DeepShareError

ROOT = Path(__file__).resolve().parents[2]
KUBERAY = ROOT / "cluster_yamls" / "kuberay-autoscaling.yaml"


# -- helpers -------------------------------------------------------------------------------------
def bomb_items(levels: int, indent: str) -> str:
    """YAML list items defining anchors a0..a{levels-1}: a{i} is 9 aliases of a{i-1}, so *a{levels-1}
    stands for 9**levels strings ("billion laughs"); the file stays a few hundred bytes."""
    lines = [f'{indent}- &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, levels):
        lines.append(f"{indent}- &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def run_child(code: str, *, timeout: float, memory_bytes: int = 2 << 30) -> subprocess.CompletedProcess[str]:
    """``code`` in a fresh interpreter (repository root as cwd), its address space limited."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    try:
        return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True,
                              text=True, timeout=timeout, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"still running after {timeout} s (unbounded work on a small input)")


def run_cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``deepshare ARGV`` as a user runs it (its own process, a UTF-8 locale), with a timeout."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONIOENCODING"}
    env["LC_ALL"] = "C.UTF-8"
    try:
        return subprocess.run([sys.executable, "-m", "deepshare", *argv], cwd=ROOT, capture_output=True, text=True,
                              timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"deepshare {' '.join(argv)}: still running after {timeout} s")


def kuberay_with(replace: str, by: str) -> str:
    text = KUBERAY.read_text()
    assert replace in text
    return text.replace(replace, by, 1)


# -- 1. YAML alias bombs: exponential work in cluster YAML validation ------------------------------
def test_cluster_validate_of_a_valid_manifest_with_an_alias_bomb_is_bounded(tmp_path):
    """find_placeholders walks every path of the alias graph: 9**8 strings, about a minute of CPU
    for a 5 KB file (9**9: ten minutes); it should walk each shared node once (or refuse)."""
    text = "x-anchors:\n" + bomb_items(8, "  ") + kuberay_with("  name: deepshare\n",
                                                              "  name: deepshare\n  annotations: {x: *a7}\n")
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    done = run_child(f"""
        from deepshare.raycluster.cluster_yaml import load_cluster_yaml
        from deepshare.core.errors import DeepShareError
        try:
            load_cluster_yaml({str(path)!r}); print("OK")
        except DeepShareError as exc:
            print("ERROR", str(exc)[:200])
    """, timeout=20)
    assert done.returncode == 0 and done.stdout.startswith(("OK", "ERROR")), done.stderr[-2000:]


def test_kuberay_head_group_alias_bomb_is_not_serialised(tmp_path):
    """_kuberay checks the monitor command with json.dumps(head): an aliased head group expands to
    9**9 strings, gigabytes, for a 5 KB file."""
    text = "x-anchors:\n" + bomb_items(9, "  ") + kuberay_with("  headGroupSpec:\n",
                                                              "  headGroupSpec:\n    x-extra: *a8\n")
    path = tmp_path / "head-bomb.yaml"
    path.write_text(text)
    done = run_child(f"""
        from deepshare.raycluster.cluster_yaml import parse_cluster_yaml
        from deepshare.core.errors import DeepShareError
        try:
            parse_cluster_yaml(open({str(path)!r}).read(), "head-bomb.yaml"); print("OK")
        except DeepShareError as exc:
            print("ERROR", str(exc)[:200])
    """, timeout=60, memory_bytes=2 << 30)
    assert done.returncode == 0 and done.stdout.startswith(("OK", "ERROR")), done.stderr[-2000:]


@pytest.mark.parametrize("where", ["card", "apiVersion", "minReplicas"])
def test_error_messages_do_not_expand_aliased_values(where):
    """Errors quote the offending value with repr()/str(): an aliased value becomes a message of
    9**levels strings (3.7 MB here; 9 levels: gigabytes). A one-line error stays short."""
    from deepshare.policies.policy_card import parse_card
    from deepshare.raycluster.cluster_yaml import parse_cluster_yaml

    if where == "card":
        text = "x:\n" + bomb_items(6, "  ") + "card: *a5\n"
        parse = parse_card
    elif where == "apiVersion":
        text = "kind: RayCluster\nx:\n" + bomb_items(6, "  ") + "apiVersion: *a5\n"
        parse = parse_cluster_yaml
    else:
        text = "x-anchors:\n" + bomb_items(6, "  ") + kuberay_with("      minReplicas: 0\n", "      minReplicas: *a5\n")
        parse = parse_cluster_yaml
    with pytest.raises(DeepShareError) as exc:
        parse(text, "bomb.yaml")
    assert len(str(exc.value)) < 10_000, f"{len(str(exc.value)):,} characters"


# -- 2. link parameters that make the simulator loop forever ---------------------------------------
@pytest.mark.parametrize("value", ["NaN", "Infinity"])
def test_link_params_with_a_non_finite_kappa_are_refused_not_simulated_forever(tmp_path, value):
    params = tmp_path / "params.json"
    params.write_text('{"models": {}, "kappa": {"MoE": {"MoE": %s}}}' % value)
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\n"
                     "a,0,MoE,8,100,\nb,0,MoE,8,100,\nc,0,MoE,4,100,\nd,0,MoE,4,100,\n")
    done = run_cli("simulate", "--trace", str(trace), "--policy", "las+consolidated", "--contention", "link",
                   "--link-params", str(params), "--nodes", "1", "--no-progress", timeout=15)
    assert done.returncode == 2, done.stderr[-2000:]
    one_error_line(done.stderr, str(params), "kappa")


# -- 3. integers PyYAML cannot convert --------------------------------------------------------------
BIG = "9" * 5000


@pytest.mark.parametrize("kind", ["cluster spec", "tenants file", "job spec"])
def test_yaml_integers_past_python_digit_limit_are_one_line_errors(kind):
    """yaml.safe_load raises ValueError (Python's 4,300-digit int limit), which load_yaml lets through."""
    from deepshare.core.topology import parse_topology
    from deepshare.runtime.spec import parse_spec_text
    from deepshare.tenants.spec import parse_tenants

    if kind == "cluster spec":
        call = lambda: parse_topology(f"node_types:\n  t: {{gpus: {BIG}}}\nnodes:\n  - {{type: t}}\n", "c.yaml")  # noqa: E731
    elif kind == "tenants file":
        call = lambda: parse_tenants(f"queues:\n  - {{name: a, nominal_gpus: {BIG}}}\n", "t.yaml")  # noqa: E731
    else:
        call = lambda: parse_spec_text(  # noqa: E731
            f"name: j\ngpus: {BIG}\nmodel: m\nentrypoint: a.b:c\ncheckpoint_dir: ck\n", "j.yaml")
    with pytest.raises(DeepShareError):
        call()


def test_simulate_cluster_spec_with_a_huge_integer_is_one_line(tmp_path, capsys):
    spec = tmp_path / "c.yaml"
    spec.write_text(f"node_types:\n  t: {{gpus: {BIG}}}\nnodes:\n  - {{type: t, count: 1}}\n")
    trace = tmp_path / "t.csv"
    trace.write_text("job_id,submit_time,model,gpus,duration_s,total_samples\na,0,vgg19,1,10,\n")
    try:
        rc, _, err = cli(capsys, "simulate", "--trace", trace, "--policy", "fifo+packed", "--cluster", spec, "--no-progress")
    except ValueError as exc:
        pytest.fail(f"traceback: {type(exc).__name__}: {str(exc)[:120]}")
    assert rc == 2
    one_error_line(err, str(spec))


# -- 4. strings with lone surrogates (valid JSON/YAML escapes, not encodable text) -------------------
def test_simulate_jobs_csv_with_a_lone_surrogate_job_id(tmp_path):
    trace = tmp_path / "t.json"
    trace.write_text('{"\\ud800": {"model": "vgg19", "gpu_demand": 1, "total_samples_to_train": 10}}')
    out = tmp_path / "jobs.csv"
    done = run_cli("simulate", "--trace", str(trace), "--policy", "las+consolidated", "--no-progress",
                   "--jobs-csv", str(out))
    assert "Traceback" not in done.stderr, done.stderr[-1500:]
    assert done.returncode in (0, 2)
    if done.returncode == 0:
        out.read_bytes().decode("utf-8")


def test_clusters_import_kubectl_node_name_with_a_lone_surrogate(tmp_path, capsys):
    nodes = tmp_path / "nodes.json"
    nodes.write_text('{"kind": "Node", "metadata": {"name": "n\\ud800", "labels": {"rack": "r1"}}}')
    try:
        rc, _, err = cli(capsys, "clusters", "import", nodes, "--level", "rack=rack")
    except UnicodeError as exc:
        pytest.fail(f"traceback: {type(exc).__name__}: {exc}")
    assert rc == 2
    one_error_line(err, str(nodes))


def test_cluster_validate_group_name_with_a_lone_surrogate(tmp_path):
    path = tmp_path / "k.yaml"
    path.write_text(kuberay_with("groupName: l4-pcie", 'groupName: "l4\\ud800"'))
    done = run_cli("cluster", "validate", str(path))
    assert "Traceback" not in done.stderr, done.stderr[-1500:]
    assert done.returncode in (0, 2)


# -- 5. calibrate --samples: a CSV field past the csv module's limit ---------------------------------
def test_calibrate_samples_with_an_oversized_field_is_one_line(tmp_path):
    from deepshare.core.contention.link.samples import load_samples

    path = tmp_path / "samples.csv"
    path.write_text("model,gpus,nodes,co_model,co_gpus,co_nodes,samples_per_s\nMoE,4,2,,,,17.1\n"
                    'MoE,4,2,"' + "x" * 200_000 + '",8,4,7.9\n')
    with pytest.raises(DeepShareError) as exc:
        load_samples(path)
    assert "line 3" in str(exc.value)


def test_calibrate_json_report_is_standard_json(tmp_path):
    """Two samples and --folds 2: the baselines are the mean of an empty slice, written as NaN
    (not JSON: jq, JavaScript and strict parsers refuse the file)."""
    samples = tmp_path / "samples.csv"
    samples.write_text("model,gpus,nodes,co_model,co_gpus,co_nodes,samples_per_s\nMoE,4,2,,,,17.1\nMoE,4,2,MoE,4,2,7.9\n")
    report = tmp_path / "fit.json"
    done = run_cli("calibrate", "--samples", str(samples), "--folds", "2", "--starts", "1", "--workers", "1",
                   "--json", str(report), timeout=120)
    if done.returncode == 2:  # refused: one error line, no traceback
        assert "Traceback" not in done.stderr
        assert done.stderr.strip().splitlines()[-1].startswith("deepshare: error: ")
        return
    assert done.returncode == 0, done.stderr[-1500:]

    def refuse(constant: str) -> None:
        raise ValueError(f"non-standard JSON constant {constant}")

    json.loads(report.read_text(), parse_constant=refuse)


# -- 6. clusters import: switch names that the written YAML reads back as other names ----------------
def test_clusters_import_does_not_merge_distinct_switches(tmp_path):
    """'d\\x85x' (NEL, a YAML 1.1 line break) is written raw in a double-quoted scalar and read back
    as 'd x': two switches of the table become one domain of the spec."""
    from deepshare.core.fabric_import import import_cluster

    text = "ip,DSW,ASW\nh1,d\x85x,a1\nh2,d x,a1\n"
    try:
        imported = import_cluster(text, "topo.csv", name="t")
    except DeepShareError:
        return  # refused: fine
    dsw = [d for d in imported.topology.fabric.domains if d.level == 1]
    assert len(dsw) == 2, [d.path for d in dsw]


def test_clusters_import_host_id_with_a_yaml_line_break_is_one_line(tmp_path, capsys):
    """A host id with NEL passes the name check, is written raw, reads back as 'h 1', and the
    load-back check ends the command with AssertionError ("a bug, not an input")."""
    table = tmp_path / "topo.csv"
    table.write_bytes(b"ip,DSW,ASW\nh\xc2\x851,d1,a1\n")
    try:
        rc, out, err = cli(capsys, "clusters", "import", table)
    except AssertionError as exc:
        pytest.fail(f"traceback: AssertionError: {exc}")
    if rc == 2:
        one_error_line(err, str(table))
        return
    assert rc == 0  # written escaped, so it reads back as the host it names
    from deepshare.core.topology import parse_topology

    assert [n.name for n in parse_topology(out, "spec").nodes] == ["h\x851"]


# -- 7. YAML booleans read as numbers in a cluster spec ----------------------------------------------
@pytest.mark.parametrize("spec", [
    "node_types:\n  t: {gpus: yes}\nnodes:\n  - {type: t}\n",
    "node_types:\n  t: {gpus: 8}\nnodes:\n  - {type: t, count: on}\n",
    "node_types:\n  t: {gpus: 8, nic_gbps: true}\nnodes:\n  - {type: t}\n",
])
def test_cluster_spec_refuses_booleans_as_numbers(spec):
    from deepshare.core.topology import parse_topology

    with pytest.raises(DeepShareError):
        parse_topology(spec, "c.yaml")


# -- 8. duplicate YAML keys silently keep the last value ---------------------------------------------
@pytest.mark.parametrize("kind", ["tenants file", "job spec"])
def test_duplicate_yaml_keys_are_refused(kind):
    from deepshare.runtime.spec import parse_spec_text
    from deepshare.tenants.spec import parse_tenants

    with pytest.raises(DeepShareError):
        if kind == "tenants file":
            parse_tenants("queues:\n  - {name: a, nominal_gpus: 8}\nqueues:\n  - {name: b, nominal_gpus: 8}\n", "t.yaml")
        else:
            parse_spec_text("name: j\ngpus: 1\nmodel: m\nentrypoint: a.b:c\ncheckpoint_dir: ck\ngpus: 8\n", "j.yaml")


# -- 9. an output path naming a folder (trailing slash) ----------------------------------------------
def test_output_with_a_trailing_slash_is_not_written_as_a_file(tmp_path, capsys):
    out = str(tmp_path / "results") + "/"
    rc, _, err = cli(capsys, "trace", "generate", "--jobs", "3", "--out", out)
    assert not (tmp_path / "results").is_file(), "wrote a regular file named 'results' for 'results/'"
    assert rc == 2
    one_error_line(err)


def test_a_tenants_weight_of_true_is_refused():
    """YAML's ``true`` read as the fair-share weight 1.0."""
    from deepshare.tenants.spec import parse_tenants

    with pytest.raises(DeepShareError, match=r"queues\.0\.weight"):
        parse_tenants("queues:\n  - {name: a, nominal_gpus: 8, weight: true}\n", "t.yaml")
    assert parse_tenants("queues:\n  - {name: a, nominal_gpus: 8, weight: 2}\n", "t.yaml").queues["a"].weight == 2.0
