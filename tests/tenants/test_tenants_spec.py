"""The tenants file: the issue's example as written, and bad files that name the field."""

from __future__ import annotations

import pytest

from deepshare.core.errors import DeepShareError
from deepshare.core.types import JobSpec
from deepshare.tenants import parse_tenants

ISSUE_EXAMPLE = """
queues:
  - {name: team-a, cohort: main, nominal_gpus: 8, borrowing_limit_gpus: 0, weight: 1}
  - {name: team-b, cohort: main, nominal_gpus: 8, borrowing_limit_gpus: 4, weight: 2}
"""


def test_the_issues_example_is_accepted_as_written():
    tenants = parse_tenants(ISSUE_EXAMPLE)
    a, b = tenants.queues["team-a"], tenants.queues["team-b"]
    assert (a.nominal_gpus, a.borrowing_limit_gpus, a.weight, a.limit_gpus) == (8, 0, 1.0, 8)
    assert (b.nominal_gpus, b.borrowing_limit_gpus, b.weight, b.limit_gpus) == (8, 4, 2.0, 12)
    assert tenants.pools == {("cohort", "main"): 16}
    assert tenants.most_gpus("team-b") == 12


def test_lending_limits_reserve_part_of_the_quota():
    tenants = parse_tenants("queues:\n  - {name: a, cohort: c, nominal_gpus: 8, lending_limit_gpus: 2}\n"
                            "  - {name: b, cohort: c, nominal_gpus: 4}\n")
    assert tenants.queues["a"].reserved_gpus == 6
    assert tenants.pools == {("cohort", "c"): 6}  # a lends 2, b all 4
    assert tenants.most_gpus("b") == 6  # never more than a lends


def test_jobs_find_their_queue_and_priority():
    tenants = parse_tenants(ISSUE_EXAMPLE + "default_queue: team-b\nqueue_from: user\n"
                            "priority_classes: {low: 0, high: 100}\ndefault_priority: low\n")
    spec = JobSpec("j", "m", 1, duration_s=1.0)
    assert tenants.queue_of(spec) == "team-b" and tenants.priority_of(spec) == 0
    assert tenants.queue_of(JobSpec("j", "m", 1, duration_s=1.0, user="team-a")) == "team-a"
    assert tenants.queue_of(JobSpec("j", "m", 1, duration_s=1.0, user="nobody")) == "team-b"
    assert tenants.priority_of(JobSpec("j", "m", 1, duration_s=1.0, priority="high")) == 100


@pytest.mark.parametrize("written, weight", [("1e3", 1000.0), ("2.5E-1", 0.25), ("1.0e+3", 1000.0), ("4", 4.0)])
def test_a_weight_with_an_exponent_is_the_number_it_means(written, weight):
    # YAML 1.1 reads 1e3 (no dot) as a string; it was refused as "Input should be a valid number".
    assert parse_tenants(f"queues: [{{name: a, nominal_gpus: 1, weight: {written}}}]").queues["a"].weight == weight


@pytest.mark.parametrize("written, message", [
    ("abc", "Input should be a valid number"), ("true", "Input should be a valid number"),
    ("1e7", "Input should be less than or equal to 1000000"), ("1e400", "Input should be a finite number"),
])
def test_a_weight_that_is_no_number_or_out_of_range_is_still_refused(written, message):
    with pytest.raises(DeepShareError, match=f"^t.yaml: queues.0.weight: {message}"):
        parse_tenants(f"queues: [{{name: a, nominal_gpus: 1, weight: {written}}}]", "t.yaml")


def test_surrounding_tabs_and_line_breaks_are_stripped_from_class_keys_as_from_queue_names():
    tenants = parse_tenants('queues: [{name: "a\\t", nominal_gpus: 1}]\npriority_classes: {"hi\\n": 1, "\\tlo": 0}\n')
    assert list(tenants.queues) == ["a"] and dict(tenants.priority_classes) == {"hi": 1, "lo": 0}
    # the line breaks beyond ASCII too (U+0085, U+2028), around a class key as around a queue name
    tenants = parse_tenants('queues: [{name: "a\\u2028", nominal_gpus: 1}]\npriority_classes: {"hi\\u2028": 1, "\\x85lo": 0}\n')
    assert list(tenants.queues) == ["a"] and dict(tenants.priority_classes) == {"hi": 1, "lo": 0}


def test_priority_class_names_are_stripped_like_every_other_name():
    tenants = parse_tenants("queues: [{name: a, nominal_gpus: 1}]\npriority_classes: {' high ': 100, low: 0}\n"
                            "default_priority: ' high'\n")
    assert dict(tenants.priority_classes) == {"high": 100, "low": 0} and tenants.default_priority == "high"


@pytest.mark.parametrize("text, message", [
    ("queues: []", "t.yaml: queues: List should have at least 1 item"),
    ("queues: [{name: a, nominal_gpus: -1}]", "t.yaml: queues.0.nominal_gpus: Input should be greater than or equal to 0"),
    ("queues: [{name: a, nominal_gpus: 2.5}]", "t.yaml: queues.0.nominal_gpus: Input should be a valid integer"),
    ("queues: [{name: a, nominal_gpus: 1, weigth: 2}]", "t.yaml: queues.0.weigth: Extra inputs are not permitted"),
    ("queues: [{name: a, nominal_gpus: 1, weight: 0}]", "t.yaml: queues.0.weight: Input should be greater than 0"),
    ("queues: [{name: a, nominal_gpus: 1}, {name: a, nominal_gpus: 2}]", "t.yaml: queues.1.name: queue 'a' is declared twice"),
    ("queues: [{name: a, nominal_gpus: 1, lending_limit_gpus: 3}]", "t.yaml: queues.0.lending_limit_gpus: at most nominal_gpus (1), got 3"),
    ("queues: [{name: a, nominal_gpus: 1, cohort: c}, {name: b, nominal_gpus: 2, borrowing_limit_gpus: 0}]",
     "t.yaml: queues.1.borrowing_limit_gpus: needs a cohort (a queue on its own neither borrows nor lends)"),
    ("queues: [{name: a, nominal_gpus: 2, lending_limit_gpus: 1}]",
     "t.yaml: queues.0.lending_limit_gpus: needs a cohort (a queue on its own neither borrows nor lends)"),
    ("queues: [{name: a, nominal_gpus: 1, cohort: x}]\ncohorts: [{name: y}]", "t.yaml: queues.0.cohort: cohort 'x' is not in cohorts"),
    ("queues: [{name: a, nominal_gpus: 1}]\ndefault_queue: b", "t.yaml: default_queue: queue 'b' is not declared"),
    ("queues: [{name: a, nominal_gpus: 1}]\ndefault_priority: hi", "t.yaml: default_priority: class 'hi' is not in priority_classes"),
    ("queues: [{name: a, nominal_gpus: 1}]\npriority_classes: {hi: x}", "t.yaml: priority_classes.hi: Input should be a valid integer"),
    ("queues: [{name: a, nominal_gpus: 1}]\nqueue_from: team", "t.yaml: queue_from: Input should be 'user' or 'vc'"),
    ("queues: [{name: a, nominal_gpus: 1, queueing: fifo}]", "t.yaml: queues.0.queueing: Input should be 'strict' or 'best-effort'"),
    ("queues: [{name: a, nominal_gpus: 1, queueing: true}]", "t.yaml: queues.0.queueing: Input should be 'strict' or 'best-effort'"),
    ("queues: [{name: a, nominal_gpus: 1}]\npriority_classes: {low: 0, ' low': 100}",
     "t.yaml: priority_classes.low: declared twice (as 'low' and ' low')"),
    ("queues: [{name: a, nominal_gpus: 1}]\npriority_classes: {'  ': 0}",
     "t.yaml: priority_classes: a class name must not be blank, got '  '"),
    ("- a", "t.yaml: expected a mapping"),
    # names reach the placement service's requests, which refuse control characters, logs and labels
    ('queues: [{name: "team\\ta", nominal_gpus: 1}]', "t.yaml: queues.0.name: String should match pattern"),
    ('queues: [{name: a, nominal_gpus: 1, cohort: "c\\tx"}]', "t.yaml: queues.0.cohort: String should match pattern"),
    # DEL, C1 controls and bidirectional overrides too: they reorder or break a logged line
    ('queues: [{name: "te\\u202Eam", nominal_gpus: 1}]', "t.yaml: queues.0.name: String should match pattern"),
    ('queues: [{name: a, nominal_gpus: 1}]\npriority_classes: {"h\\x7fi": 1}',
     "t.yaml: priority_classes.'h\\x7fi'.[key]: String should match pattern"),
    # the key is quoted in the path whatever the control character: the error stays one line
    ('queues: [{name: a, nominal_gpus: 1}]\npriority_classes: {"h\\u2028i": 1}',
     "t.yaml: priority_classes.'h\\u2028i'.[key]: String should match pattern"),
    # a key with a line break inside is quoted in the path: the error stays one line
    ('queues: [{name: a, nominal_gpus: 1}]\npriority_classes: {"h\\ni": 1}',
     "t.yaml: priority_classes.'h\\ni'.[key]: String should match pattern"),
])
def test_a_bad_file_names_the_field(text, message):
    with pytest.raises(DeepShareError) as info:
        parse_tenants(text, "t.yaml")
    assert str(info.value).startswith(message), str(info.value)
    assert "Traceback" not in str(info.value) and "\n" not in str(info.value)


def test_jobs_no_queue_can_hold_are_refused_up_front():
    tenants = parse_tenants(ISSUE_EXAMPLE)
    with pytest.raises(DeepShareError, match="job 'big' asks 9 GPUs, but its queue 'team-a' can never hold more than 8"):
        tenants.check_jobs([JobSpec("big", "m", 9, duration_s=1.0, queue="team-a")])
    with pytest.raises(DeepShareError, match="job 'x': queue 'nope' is not declared"):
        tenants.check_jobs([JobSpec("x", "m", 1, duration_s=1.0, queue="nope")])
    with pytest.raises(DeepShareError, match="job 'y': queue 'default' is not declared"):
        tenants.check_jobs([JobSpec("y", "m", 1, duration_s=1.0)])
    with pytest.raises(DeepShareError, match="job 'z': priority class 'vip' is not declared"):
        tenants.check_jobs([JobSpec("z", "m", 1, duration_s=1.0, queue="team-a", priority="vip")])


def test_canonical_traces_carry_queue_and_priority(tmp_path):
    from deepshare.core.traces import load
    from deepshare.core.traces.canonical import write_canonical

    jobs = [JobSpec("a", "m", 1, duration_s=5.0, queue="team-a", priority="high"), JobSpec("b", "m", 2, duration_s=7.0)]
    path = write_canonical(jobs, tmp_path / "t.csv")
    assert path.read_text().splitlines()[0].endswith(",queue,priority")
    assert list(load(str(path)).jobs) == jobs
    plain = write_canonical([jobs[1]], tmp_path / "p.csv")
    assert "queue" not in plain.read_text()
