"""The job-side API, ``deepshare.job``: what a training job calls under the live scheduler.

A stable import path for job code (``from deepshare import job``); the implementation lives with
the scheduler it talks to, in :mod:`deepshare.runtime.job`.
"""

from deepshare.runtime.job import (
    CHECKPOINT_FILE,
    CorruptCheckpoint,
    UnsafeCheckpoint,
    attempt,
    checkpoint_dir,
    init_process_group,
    job_id,
    load_checkpoint,
    local_rank,
    master_addr,
    master_port,
    rank,
    report,
    save_checkpoint,
    should_stop,
    world_size,
)

__all__ = [
    "CHECKPOINT_FILE", "CorruptCheckpoint", "UnsafeCheckpoint", "attempt", "checkpoint_dir", "init_process_group", "job_id",
    "load_checkpoint", "local_rank", "master_addr", "master_port", "rank", "report", "save_checkpoint",
    "should_stop", "world_size",
]
