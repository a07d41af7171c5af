"""Review of the training configs (``deepshare train/tune/imitate CONFIG``), parsing stage only:
each test reproduces a confirmed defect of :func:`deepshare.rl.train.parse_train_config` (it fails
on the code as reviewed and passes once fixed). The ``env:`` section is a plain ``dict[str, Any]``
turned into :class:`~deepshare.rl.env.EnvConfig` without type checks, so wrong types end in a
traceback (here or when training starts), and sizes are unbounded.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from deepshare.core.errors import DeepShareError

pytest.importorskip("ray.rllib")

ROOT = Path(__file__).resolve().parents[2]
BASE = (ROOT / "rllib_configs" / "rl_base.yaml").read_text()


def with_env(key: str, value: str) -> str:
    """rl_base.yaml with ``env.KEY`` replaced (or added) by the YAML text ``value``."""
    out, skipping, found = [], False, False
    for line in BASE.splitlines():
        if line.startswith(f"  {key}:"):
            out.append(f"  {key}: {value}")
            skipping = found = True
            continue
        if skipping and line.startswith("    -"):
            continue  # the old value's list items
        skipping = False
        out.append(line)
    text = "\n".join(out) + "\n"
    if not found:
        text = text.replace("  cluster: testbed\n", f"  cluster: testbed\n  {key}: {value}\n")
    return text


def parse(text: str, tmp_path: Path):
    from deepshare.rl.train import parse_train_config

    path = tmp_path / "config.yaml"
    path.write_text(text)
    return parse_train_config(text, path)


@pytest.mark.parametrize("key, value", [
    ("cluster", "1"),                 # TypeError in Path()
    ("cluster", "[a]"),
    ("traces", "[1]"),                # AttributeError: 'int' object has no attribute 'startswith'
    ("generated_fraction", "abc"),    # TypeError: '<=' not supported between float and str
    ("generated_loads", "5"),         # TypeError: 'int' object is not iterable
    ("contentions", "[[a]]"),         # TypeError: unhashable type: 'list'
    ("offer_order", "[a]"),           # TypeError: unhashable type: 'list'
])
def test_wrong_types_in_env_are_one_line_errors(tmp_path, key, value):
    with pytest.raises(DeepShareError):
        parse(with_env(key, value), tmp_path)


@pytest.mark.parametrize("key, value", [
    ("max_candidates", "abc"),   # accepted; `deepshare train`/`imitate` then die in EncodingConfig: ValueError traceback
    ("jobs_considered", "-1"),   # the same
    ("reward_scale", "abc"),     # accepted; `deepshare imitate` then dies in the env: TypeError traceback
])
def test_invalid_env_values_are_refused_when_the_config_is_read(tmp_path, key, value):
    with pytest.raises(DeepShareError):
        parse(with_env(key, value), tmp_path)


def test_generated_cluster_sizes_are_bounded(tmp_path):
    """generated_nodes: [200000] builds a 200,000-node cluster while checking the config (10**8:
    over 6.5 GB and minutes); a cluster spec stops at 100,000 nodes, --nodes at 65,536."""
    with pytest.raises(DeepShareError):
        parse(with_env("generated_nodes", "[200000]"), tmp_path)


def test_ppo_error_does_not_expand_an_aliased_value(tmp_path):
    """check_ppo quotes the value with repr(): an aliased list of 9**6 strings is a 3.7 MB message
    (9**8: 2.4 GB of memory for a 424-byte config)."""
    lines = ["name: x", "ppo:", "  gamma:", '    - &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 6):
        lines.append(f"    - &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]")
    with pytest.raises(DeepShareError) as exc:
        parse("\n".join(lines) + "\n", tmp_path)
    assert len(str(exc.value)) < 10_000, f"{len(str(exc.value)):,} characters"
