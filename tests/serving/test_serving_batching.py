"""The replica's batcher: concurrent requests' observations share a pass, each gets its own answer."""

from __future__ import annotations

import asyncio

import pytest

from deepshare.serving.batching import Batcher


def recording(fn=lambda items: [x * 10 for x in items]):  # type: ignore[no-untyped-def]
    calls: list[list[int]] = []

    def batch(items):  # type: ignore[no-untyped-def]
        calls.append(list(items))
        return fn(items)

    return batch, calls


def test_items_awaited_together_share_one_batch_and_get_their_own_answers():
    batch, calls = recording()
    batcher = Batcher(batch)

    async def main():  # type: ignore[no-untyped-def]
        return await asyncio.gather(*(batcher(i) for i in range(5)))

    assert asyncio.run(main()) == [0, 10, 20, 30, 40]
    assert calls == [[0, 1, 2, 3, 4]]


def test_a_full_batch_runs_at_once_and_the_rest_follows():
    batch, calls = recording()
    batcher = Batcher(batch, max_size=2)

    async def main():  # type: ignore[no-untyped-def]
        return await asyncio.gather(*(batcher(i) for i in range(5)))

    assert asyncio.run(main()) == [0, 10, 20, 30, 40]
    assert calls == [[0, 1], [2, 3], [4]]


def test_one_caller_at_a_time_is_scored_alone():
    batch, calls = recording()
    batcher = Batcher(batch)

    async def main():  # type: ignore[no-untyped-def]
        return [await batcher(i) for i in range(3)]

    assert asyncio.run(main()) == [0, 10, 20]
    assert calls == [[0], [1], [2]]


@pytest.mark.parametrize("wait_s, batches", [(0.5, [[0, 1]]), (0.0, [[0], [1]])], ids=["wait", "no-wait"])
def test_a_later_caller_joins_only_within_the_wait(wait_s, batches):
    batch, calls = recording()
    batcher = Batcher(batch, wait_s=wait_s)

    async def late(i):  # type: ignore[no-untyped-def]
        await asyncio.sleep(0.01)
        return await batcher(i)

    async def main():  # type: ignore[no-untyped-def]
        return await asyncio.gather(batcher(0), late(1))

    assert asyncio.run(main()) == [0, 10]
    assert calls == batches


def test_a_failing_batch_fails_only_the_caller_whose_item_fails_alone_and_the_next_batch_works():
    """The batch's exception went to every caller in it: the placement service then told each
    client the policy failed on its request, and the live scheduler searched innocent jobs."""
    calls = []

    def flaky(items):  # type: ignore[no-untyped-def]
        calls.append(list(items))
        if 13 in items:
            raise ValueError("bad observation")
        return [x + 1 for x in items]

    batcher = Batcher(flaky)

    async def main():  # type: ignore[no-untyped-def]
        first = await asyncio.gather(batcher(13), batcher(2), return_exceptions=True)
        return first, await batcher(5)

    first, after = asyncio.run(main())
    assert isinstance(first[0], ValueError) and first[1] == 3
    assert after == 6 and calls == [[13, 2], [13], [2], [5]]


def test_a_batch_failing_only_together_gives_every_caller_its_own_answer():
    """A failure of the batch itself (a batched forward pass out of memory), not of any item."""
    batcher = Batcher(lambda items: [x * 10 for x in items] if len(items) == 1 else 1 / 0)

    async def main():  # type: ignore[no-untyped-def]
        return await asyncio.gather(batcher(1), batcher(2), batcher(3))

    assert asyncio.run(main()) == [10, 20, 30]


def test_an_answer_of_the_wrong_length_is_an_error_not_a_wrong_answer():
    batcher = Batcher(lambda items: items[:-1])

    async def main():  # type: ignore[no-untyped-def]
        return await asyncio.gather(batcher(1), batcher(2), return_exceptions=True)

    errors = asyncio.run(main())
    assert all(isinstance(e, RuntimeError) and "answered 0 items for 1" in str(e) for e in errors)


def test_a_cancelled_caller_does_not_disturb_the_others():
    batch, calls = recording()
    batcher = Batcher(batch, wait_s=0.05)

    async def main():  # type: ignore[no-untyped-def]
        gone = asyncio.ensure_future(batcher(1))
        kept = asyncio.ensure_future(batcher(2))
        await asyncio.sleep(0)
        gone.cancel()
        return await kept, gone.cancelled()

    assert asyncio.run(main()) == (20, True)
    assert calls == [[1, 2]]


def test_sizes_are_reported_before_each_batch_runs():
    seen: list[int] = []
    batcher = Batcher(lambda items: items, max_size=3)
    batcher.sizes = seen.append

    async def main():  # type: ignore[no-untyped-def]
        await asyncio.gather(*(batcher(i) for i in range(4)))

    asyncio.run(main())
    assert seen == [3, 1]


@pytest.mark.parametrize("kwargs, message", [({"max_size": 0}, "max_size"), ({"wait_s": -1.0}, "wait_s")])
def test_bad_settings_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Batcher(lambda items: items, **kwargs)
