"""Forward passes of concurrent requests, batched on the replica's event loop.

While several requests decide at once, each step's observation is awaited here; the ones that
arrive before the loop gets round to the batch go through the network together (one pass of
B x K rows instead of B passes). ``wait_s`` 0 means "batch what is already queued, never wait
for company": the batch runs as soon as the loop has run everything that was ready when the
first observation came. A full batch (``max_size``) runs at once.

This replaced ``@serve.batch``, which does the same with a queue, a background task and timed
waits per batch: on a CPU replica scoring a tiny network, that machinery cost more per request
than the forward pass it batched (``bench/serve_load.py`` prints the replica's CPU per request).
"""

from __future__ import annotations

import asyncio
from typing import Callable, Generic, TypeVar

In = TypeVar("In")
Out = TypeVar("Out")


class Batcher(Generic[In, Out]):
    """``await batcher(item)`` is ``fn([... item ...])``'s answer for ``item``; ``fn`` maps a list
    of items to a list of answers in the same order and runs on the event loop (it must be quick).
    If ``fn`` fails on a batch of several items, each is asked again alone, and gets its own
    answer or exception: one request's failure is never another's (the placement service tells a
    client the policy failed on *its* request, and the live scheduler then searches that
    request's jobs for a culprit)."""

    def __init__(self, fn: Callable[[list[In]], list[Out]], max_size: int = 16, wait_s: float = 0.0) -> None:
        if max_size < 1:
            raise ValueError(f"max_size must be at least 1, got {max_size}")
        if wait_s < 0:
            raise ValueError(f"wait_s must be >= 0, got {wait_s}")
        self.fn, self.max_size, self.wait_s = fn, max_size, wait_s
        self._items: list[In] = []
        self._futures: list[asyncio.Future[Out]] = []
        self._timer: asyncio.Handle | asyncio.TimerHandle | None = None
        self.sizes: Callable[[int], None] | None = None
        """Called with each batch's size before it runs (metrics)."""

    async def __call__(self, item: In) -> Out:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Out] = loop.create_future()
        self._items.append(item)
        self._futures.append(future)
        if len(self._items) >= self.max_size:
            self._run()
        elif self._timer is None:
            self._timer = loop.call_later(self.wait_s, self._run) if self.wait_s > 0 else loop.call_soon(self._run)
        return await future

    def _run(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        items, futures = self._items, self._futures
        if not items:
            return
        self._items, self._futures = [], []
        if self.sizes is not None:
            self.sizes(len(items))
        try:
            answers = self._answers(items)
        except Exception as exc:  # noqa: BLE001 - the batch failed: whose item was it? each alone says
            if len(items) == 1:
                if not futures[0].done():
                    futures[0].set_exception(exc)
            else:
                for item, future in zip(items, futures):
                    self._settle(future, [item])
            return
        for future, answer in zip(futures, answers):
            if not future.done():  # a waiter cancelled (its request's deadline passed) needs nothing
                future.set_result(answer)

    def _answers(self, items: list[In]) -> list[Out]:
        answers = self.fn(items)
        if len(answers) != len(items):
            raise RuntimeError(f"batch function answered {len(answers)} items for {len(items)}")
        return answers

    def _settle(self, future: "asyncio.Future[Out]", items: list[In]) -> None:
        """``future`` gets ``fn(items)``'s one answer (``items`` holds its item alone), or its exception."""
        if future.done():
            return
        try:
            future.set_result(self._answers(items)[0])
        except Exception as exc:  # noqa: BLE001 - this item's own failure, its waiter learns why
            future.set_exception(exc)
