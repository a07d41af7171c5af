"""StepState's lazily sorted orders answer what a full stable sort of the queue answers.

Each GPU demand's list is sorted only as far as it is read and launches are removed from the
sorted prefix or dropped from the heap when popped; whatever the reads and launches, every
answer must equal the straightforward one: the fitting, not yet launched queued jobs, sorted by
(key, queue position).
"""

from __future__ import annotations

from itertools import islice
from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from deepshare.core.types import Launch, Placement
from deepshare.core.view import JobView
from deepshare.policies.step_state import StepState


def key(job: JobView) -> tuple:
    return (job.remaining_s * job.gpus, job.submit_time, job.job_id)


def oldest(job: JobView) -> tuple:
    return (job.submit_time,)  # ties on purpose: queue position must break them


def make_queue(specs: list[tuple[int, int, int]]) -> tuple[JobView, ...]:
    return tuple(
        JobView(job_id=f"j{i}", model="MoE", gpus=gpus, submit_time=float(submit), remaining_s=float(rem),
                attained_gpu_s=0.0, comm_class="heavy")
        for i, (gpus, submit, rem) in enumerate(specs)
    )


def reference(queue, launched: set[str], total: int, k) -> list[JobView]:
    ordered = sorted(((k(j), i, j) for i, j in enumerate(queue)), key=lambda e: e[:2])
    return [j for _, _, j in ordered if j.job_id not in launched and j.gpus <= total]


def take_anywhere(free: list[int], gpus: int) -> Placement | None:
    counts: dict[int, int] = {}
    for node, f in enumerate(free):
        use = min(f, gpus - sum(counts.values()))
        if use > 0:
            counts[node] = use
    return Placement.of(counts) if sum(counts.values()) == gpus else None


@settings(max_examples=80, deadline=None)
@given(
    specs=st.lists(st.tuples(st.sampled_from((1, 2, 4, 8)), st.integers(0, 5), st.integers(1, 9)), min_size=1, max_size=25),
    nodes=st.integers(1, 5),
    already=st.integers(0, 3),
    ops=st.lists(st.tuples(st.integers(0, 99), st.integers(0, 12), st.booleans()), max_size=15),
)
def test_lazy_orders_match_a_full_sort(specs, nodes, already, ops):
    queue = make_queue(specs)
    free = [8] * nodes
    launches = []
    for job in queue[:already]:  # a state built for a partial that already launched some jobs
        where = take_anywhere(free, job.gpus)
        if where is None:
            break
        for node, gpus in where.alloc:
            free[node] -= gpus
        launches.append(Launch(job.job_id, where))
    state = StepState(SimpleNamespace(queued=queue), free, launches)
    launched = {l.job_id for l in launches}
    for pick, depth, by_oldest in ops:
        total = sum(free)
        for name, k in (("short", key), ("old", oldest)):
            assert list(islice(state.in_order(name, k), depth)) == reference(queue, launched, total, k)[:depth]
            skip = {j.job_id for j in queue[pick % len(queue)::3]}
            assert state.head(name, k, depth, skip) == [j for j in reference(queue, launched, total, k) if j.job_id not in skip][:depth]
        name, k = ("old", oldest) if by_oldest else ("short", key)
        assert list(state.in_order(name, k)) == reference(queue, launched, total, k)
        ref = reference(queue, launched, total, k)
        assert state.first_placed(name, k, lambda job, fr, view, pending: take_anywhere(list(fr), job.gpus)) == (
            next(((j, p) for j in ref if (p := take_anywhere(free, j.gpus)) is not None), None)
        )
        # launch any not-launched job that fits, not only a head (sorted prefix or still in the heap)
        candidates = [j for j in queue if j.job_id not in launched and take_anywhere(free, j.gpus) is not None]
        if candidates:
            job = candidates[pick % len(candidates)]
            where = take_anywhere(free, job.gpus)
            state.advance(job, where)
            for node, gpus in where.alloc:
                free[node] -= gpus
            launched.add(job.job_id)
            assert state.waiting == len(queue) - len(launched)
        total = sum(free)
        assert state.launch_may_fit() == any(j.job_id not in launched and j.gpus <= total for j in queue)
        assert state.demand == sum(j.gpus for j in queue if j.job_id not in launched)
