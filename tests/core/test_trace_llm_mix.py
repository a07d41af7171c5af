"""The ``llm`` model-mix preset: its weights, its models' link parameters, and the CLI."""

from __future__ import annotations

import logging

from deepshare.cli import main
from deepshare.core.contention.link.llm import LLM_CLASSES
from deepshare.core.contention.link.params import default_link_catalog
from deepshare.core.traces import MIX_PRESETS, generate, mix_from_spec, mix_preset
from deepshare.core.traces.generator import DEMAND_PRESETS


def test_llm_preset_weights_the_llm_classes():
    mix = mix_preset("llm")
    assert mix.probabilities == {"llama3-8b": 0.4, "llama3-70b": 0.2, "mixtral-8x7b": 0.2, "gpt3-175b": 0.1, "vit-h14": 0.1}
    assert set(mix.models) <= set(LLM_CLASSES) <= set(default_link_catalog().params)
    assert mix_from_spec("llm") == mix and "llm" in MIX_PRESETS


def test_a_gang_heavy_llm_trace_draws_only_llm_classes_quietly(caplog):
    with caplog.at_level(logging.WARNING):
        trace = generate(200, load=0.9, total_gpus=2048, demand=DEMAND_PRESETS["gang-heavy"], mix=mix_preset("llm"), seed=1)
    models = [j.model for j in trace.jobs]
    assert set(models) == set(LLM_CLASSES)
    assert min(j.gpus for j in trace.jobs) >= 16
    assert models.count("llama3-8b") > models.count("gpt3-175b")
    assert caplog.records == []


def test_trace_generate_lists_and_takes_the_llm_mix(capsys, tmp_path):
    try:
        main(["trace", "generate", "--help"])
    except SystemExit:
        pass
    assert "llm" in capsys.readouterr().out
    out = tmp_path / "t.csv"
    rc = main(["trace", "generate", "--jobs", "20", "--rate", "0.01", "--mix", "llm", "--demand", "gang-heavy",
               "--seed", "1", "--out", str(out)])
    assert rc in (0, None)
    text = out.read_text()
    assert "llama3-8b" in text and "job-00019" in text
