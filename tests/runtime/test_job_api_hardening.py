"""A second review of the job API (``deepshare.job``), each case failing before its fix: reports
that ended the training step (an overflowing number, an unwritable control folder), warned once
per call and fsynced every call; checkpoints read whole into memory (and a huge planted file a
bare MemoryError), a flipped bit loaded as a wrong weight, a GPU checkpoint on a CPU node called
damaged, states saved fine that only the relaunch refused; launcher variables out of range."""

from __future__ import annotations

import io
import json
import os
import re
import struct
import tracemalloc
import warnings
import zipfile
from pathlib import Path, PurePosixPath

import pytest
from job_env import job_env

from deepshare import job
from deepshare.runtime import job as job_impl

torch = pytest.importorskip("torch")
np = pytest.importorskip("numpy")


@pytest.fixture
def env(tmp_path, monkeypatch):
    job_impl._warned.clear()  # report() warns once per process: each test starts unwarned...
    yield job_env(tmp_path, monkeypatch)
    job_impl._warned.clear()  # ...and leaves no one else's warning swallowed


def _report_doc(env) -> tuple:
    doc = json.loads((env / "ctl" / "report.json").read_text())
    return doc["samples"], doc["throughput"], doc["step"]


def _messages(caught) -> list[str]:
    return [str(w.message) for w in caught]


def test_an_overflowing_report_value_is_left_out_not_raised(env):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job.report(samples=10**400, throughput=2.5, step=10**400)  # float(10**400): OverflowError
    assert _report_doc(env) == (None, 2.5, None)
    assert _messages(caught) == [
        "deepshare.job.report: samples=an integer of about 401 digits left out: expected a number from 0 to 1e+18; "
        "later such values of samples are left out without a warning",
        "deepshare.job.report: step=an integer of about 401 digits left out: expected a number from 0 to 9.0072e+15 "
        "(a whole step); later such values of step are left out without a warning",
    ]


def test_report_warns_once_per_field_and_problem_whatever_the_value(env):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # what a once-per-location filter cannot do for a varying message
        for i in range(50):
            job.report(samples=32 * i, throughput=100.0, step=i + 0.5)  # a fractional step, every call
        assert _report_doc(env) == (32 * 49, 100.0, None)
        job.report(step=-1)  # another problem of the same field: warned about too, once
        job.report(step=-2)
        job.report(throughput="fast")  # another field
    assert _messages(caught) == [
        "deepshare.job.report: step=0.5 left out: expected a number from 0 to 9.0072e+15 (a whole step); "
        "later such values of step are left out without a warning",
        "deepshare.job.report: step=-1 left out: expected a number from 0 to 9.0072e+15 (a whole step); "
        "later such values of step are left out without a warning",
        "deepshare.job.report: throughput='fast' left out: expected a number from 0 to 1e+12; "
        "later such values of throughput are left out without a warning",
    ]
    assert all(w.filename == __file__ for w in caught)  # pointed at the job's own call


def test_a_report_that_cannot_be_written_warns_once_and_the_step_goes_on(env):
    (env / "ctl").rmdir()  # the control folder gone (or a full disk, a read-only mount)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job.report(samples=1, throughput=1.0, step=1)
        job.report(samples=2, throughput=1.0, step=2)
    assert _messages(caught) == [
        f"deepshare.job.report: progress report not written ({env / 'ctl' / 'report.json'}: cannot write progress "
        "report: No such file or directory); the job goes on, and later reports that cannot be written are left "
        "out without a warning"]


def test_a_report_is_not_fsynced_but_a_checkpoint_is(env, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    for step in range(3):
        job.report(samples=step, throughput=1.0, step=step)
    assert synced == [] and _report_doc(env) == (2, 1.0, 2)
    assert not [p for p in (env / "ctl").iterdir() if p.name != "report.json"]  # still through a renamed file
    job.save_checkpoint({"step": 1})
    assert len(synced) == 1


def _megabytes_traced(call) -> float:
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def test_saving_and_loading_a_checkpoint_make_no_copy_of_it_in_memory(env):
    state = {"w": torch.ones(4 * 2**20)}  # 16 MiB
    assert _megabytes_traced(lambda: job.save_checkpoint(state)) < 4  # was 18: the whole file in a BytesIO
    loaded = {}
    assert _megabytes_traced(lambda: loaded.update(job.load_checkpoint())) < 4  # was 16: the file read whole
    assert torch.equal(loaded["w"], state["w"])


def test_a_huge_planted_file_is_corrupt_not_a_memory_error(env):
    folder = env / "ckpt"
    folder.mkdir()
    with open(folder / "checkpoint.pt", "wb") as fh:
        fh.truncate(1 << 40)  # 1 TiB, sparse: nothing on disk
    with pytest.raises(job.CorruptCheckpoint, match="checkpoint.pt: damaged or not a checkpoint"):
        job.load_checkpoint()


def test_a_flipped_bit_in_a_checkpoint_is_caught_by_its_crc(env):
    path = job.save_checkpoint({"step": 1, "w": torch.ones(4)})
    data = bytearray(path.read_bytes())
    at = data.find(torch.ones(4).numpy().tobytes())
    data[at + 3] ^= 0x01  # w[0]: 1.0 would load as 0.25
    path.write_bytes(bytes(data))
    with pytest.raises(job.CorruptCheckpoint) as error:
        job.load_checkpoint()
    assert str(error.value) == f"{path}: damaged or not a checkpoint (record archive/data/0 fails its CRC check)"


def _zip_of(method: int, data: bytes, copies: int = 1) -> bytes:
    """A zip holding ``data`` as ``archive/data.pkl`` (compressed by ``method``), its central
    directory listing that one record ``copies`` times."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as archive:
        archive.writestr("archive/data.pkl", data)
    raw = buf.getvalue()
    if copies == 1:
        return raw
    start = raw.rfind(b"PK\x01\x02")
    end = raw.rfind(b"PK\x05\x06")
    entry = raw[start:end]
    listing = entry * copies
    tail = b"PK\x05\x06" + struct.pack("<4H2LH", 0, 0, copies, copies, len(listing), start, 0)
    return raw[:start] + listing + tail


@pytest.mark.parametrize("planted, reason", [
    # a few hundred bytes of bzip2 that unpack to 8 MiB (64 MiB took 0.3 s, 16 such records 6 s:
    # the CRC pass unpacked them before torch, which refuses them at once, was asked)
    (lambda: _zip_of(zipfile.ZIP_BZIP2, bytes(8 << 20)), "record 'archive/data.pkl' is compressed"),
    (lambda: _zip_of(zipfile.ZIP_DEFLATED, bytes(1 << 20)), "record 'archive/data.pkl' is compressed"),
    (lambda: _zip_of(zipfile.ZIP_STORED, bytes(1000), copies=16), "two entries share the bytes of record"),
])
def test_a_planted_zip_is_refused_before_its_records_are_unpacked(env, planted, reason):
    """``torch.save`` stores each record once, uncompressed: anything else is refused from the
    zip's directory, before the CRC pass reads a byte of it."""
    folder = env / "ckpt"
    folder.mkdir()
    (folder / "checkpoint.pt").write_bytes(planted())
    read = []
    original = zipfile.ZipFile.testzip
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(zipfile.ZipFile, "testzip", lambda self: read.append(1) or original(self))
        with pytest.raises(job.CorruptCheckpoint, match=re.escape(reason)):
            job.load_checkpoint()
    assert read == []


def _as_if_saved_on_a_gpu(path) -> None:
    """Rewrite the checkpoint's storage locations from ``cpu`` to ``cuda:0`` (pickle's
    ``BINUNICODE`` of each), as a rank saving CUDA tensors writes them."""
    source, out = zipfile.ZipFile(path), io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        for name in source.namelist():
            record = source.read(name)
            if name.endswith("data.pkl"):
                record = record.replace(b"X\x03\x00\x00\x00cpu", b"X\x06\x00\x00\x00cuda:0")
            archive.writestr(name, record)
    path.write_bytes(out.getvalue())


def test_a_memory_error_while_loading_names_the_file_and_its_size_and_is_not_corrupt(env, monkeypatch):
    path = job.save_checkpoint({"step": 1})

    def out_of_memory(*_args, **_kwargs):
        raise MemoryError

    monkeypatch.setattr(torch, "load", out_of_memory)
    with pytest.raises(MemoryError) as error:  # not CorruptCheckpoint: a job starting afresh would lose a good one
        job.load_checkpoint()
    assert str(error.value) == f"{path}: not enough memory to load the checkpoint ({path.stat().st_size:,} bytes)"


class _Planted:
    """Unpickling this creates a marker file: what a planted checkpoint would do."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_planted_torch_archive_that_names_code_is_refused_and_never_runs(env):
    marker = env / "pwned"
    (env / "ckpt").mkdir()
    torch.save({"step": 1, "x": _Planted(str(marker))}, env / "ckpt" / "checkpoint.pt")  # a zip, not a bare pickle
    with pytest.raises(job.UnsafeCheckpoint, match=r"checkpoint.pt: refused, the checkpoint names Python objects"):
        job.load_checkpoint()
    assert not marker.exists()
    path = env / "ckpt" / "checkpoint.pt"
    path.write_bytes(path.read_bytes()[:-30])  # the same archive cut short: damage, not a refusal
    with pytest.raises(job.CorruptCheckpoint, match="checkpoint.pt: damaged or not a checkpoint"):
        job.load_checkpoint()


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a node without CUDA")
def test_a_gpu_checkpoint_on_a_cpu_node_is_not_damaged_and_map_location_loads_it(env):
    path = job.save_checkpoint({"step": 1, "w": torch.ones(2)})
    _as_if_saved_on_a_gpu(path)
    with pytest.raises(RuntimeError) as error:
        job.load_checkpoint()
    assert not isinstance(error.value, job.CorruptCheckpoint)
    assert str(error.value) == (f"{path}: the checkpoint holds tensors on a device this node does not have "
                                "(Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is "
                                "False); load_checkpoint(map_location='cpu') loads them on the CPU")
    state = job.load_checkpoint(map_location="cpu")
    assert state["step"] == 1 and torch.equal(state["w"], torch.ones(2)) and state["w"].device.type == "cpu"


@pytest.mark.parametrize("value, types", [
    (np.int64(5), r"numpy\.(_core|core)\.multiarray\.scalar, numpy\.dtype"),
    (np.zeros(3), r"numpy\.(_core|core)\.multiarray\._reconstruct, numpy\.dtype, numpy\.ndarray"),
    (PurePosixPath("/x"), r"pathlib\.PurePosixPath"),
], ids=["numpy-number", "numpy-array", "path"])
def test_a_state_load_checkpoint_would_refuse_is_refused_at_save_and_the_old_checkpoint_kept(env, value, types):
    path = job.save_checkpoint({"step": 1})
    with pytest.raises(TypeError, match=rf"^{path}: not saved, the state holds {types}, which load_checkpoint\(\) "
                                        r"would refuse as not plain data: convert them"):
        job.save_checkpoint({"step": 2, "x": value})
    assert sorted(p.name for p in path.parent.iterdir()) == ["checkpoint.pt"]  # no temporary file left
    assert job.load_checkpoint() == {"step": 1}
    # a trusted folder: saved and loaded without the data-only check
    job.save_checkpoint({"step": 2, "x": value}, weights_only=False)
    loaded = job.load_checkpoint(weights_only=False)["x"]
    assert type(loaded) is type(value) and str(loaded) == str(value)


def test_what_load_checkpoint_reads_as_data_is_saved(env):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    state = {"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.get_rng_state(), "seen": {1, 2},
             "dtype": torch.bfloat16, "device": torch.device("cpu"), "size": torch.Size([2, 3]), "blob": b"x"}
    job.save_checkpoint(state)
    loaded = job.load_checkpoint()
    assert sorted(loaded) == sorted(state) and loaded["seen"] == {1, 2} and loaded["size"] == torch.Size([2, 3])


def test_the_torch_floor_has_a_safe_weights_only_loader_and_admits_the_pinned_torch():
    root = Path(__file__).resolve().parents[2]
    floor = re.search(r'"torch>=([0-9.]+)"', (root / "pyproject.toml").read_text()).group(1)
    pinned = re.search(r"^TORCH_VERSION := (\S+)$", (root / "Makefile").read_text(), flags=re.M).group(1)
    assert tuple(map(int, floor.split("."))) >= (2, 10)  # CVE-2025-32434 (fixed 2.6.0), CVE-2026-24747 (2.10.0)
    assert tuple(map(int, pinned.split("."))) >= tuple(map(int, floor.split(".")))


@pytest.mark.parametrize("value, message", [
    ("0", r"\$MASTER_PORT: expected an integer from 1 to 65535, got 0"),
    ("65536", r"\$MASTER_PORT: expected an integer from 1 to 65535, got 65536"),
    ("99999999", r"\$MASTER_PORT: expected an integer from 1 to 65535, got 99999999"),
    (" 1_0 ", r"\$MASTER_PORT: expected an integer from 1 to 65535, got ' 1_0 '"),
])
def test_a_master_port_outside_1_to_65535_is_refused(env, monkeypatch, value, message):
    monkeypatch.setenv("MASTER_PORT", value)
    with pytest.raises(ValueError, match=f"^{message}$"):
        job.master_port()


@pytest.mark.parametrize("variables, call, message", [
    ({"RANK": " 1_0 ", "WORLD_SIZE": "11"}, job.rank, r"\$RANK: expected an integer >= 0, got ' 1_0 '"),
    ({"RANK": "\u0663", "WORLD_SIZE": "4"}, job.rank, r"\$RANK: expected an integer >= 0, got '\u0663'"),
])
def test_only_ascii_digits_are_an_integer(env, monkeypatch, variables, call, message):
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=f"^{message}$"):
        call()


@pytest.mark.parametrize("address, url", [
    ("", "tcp://127.0.0.1:1234"),  # empty: the default, as when unset
    ("10.1.2.3", "tcp://10.1.2.3:1234"),
    ("::1", "tcp://[::1]:1234"),  # unbracketed, its colons would be read as the port's
    ("[fd00::5]", "tcp://[fd00::5]:1234"),
])
def test_the_rendezvous_url_brackets_an_ipv6_address(env, monkeypatch, address, url):
    import torch.distributed as dist

    seen = {}
    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kwargs: seen.update(kwargs))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("MASTER_ADDR", address)
    monkeypatch.setenv("MASTER_PORT", "1234")
    assert job.init_process_group() == "gloo"
    assert seen["init_method"] == url


@pytest.mark.parametrize("address", [
    "10.0.0.1:29500",  # a port in the address: the URL would read "[10.0.0.1:29500]" as an IPv6 host
    "head:29500", "[head]", "[10.0.0.1]", "tcp://head", "head node", "-head", "head\n", "[::1", "h\u00e9ad", "a" * 255,
    "::1%a b", "[::1%a]b]", "fe80::1%\x1b[2J",  # a zone id the URL would not keep
])
def test_a_master_addr_that_is_no_host_is_refused_by_name(env, monkeypatch, address):
    import torch.distributed as dist

    monkeypatch.setattr(dist, "init_process_group", lambda backend, **kwargs: pytest.fail("rendezvous attempted"))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("MASTER_ADDR", address)
    monkeypatch.setenv("MASTER_PORT", "1234")
    with pytest.raises(ValueError, match=r"^\$MASTER_ADDR: expected a host name or an IP address \(the port is "
                                         r"\$MASTER_PORT's\), got "):
        job.init_process_group()


@pytest.mark.parametrize("address, url", [
    ("node-7.cluster.local", "tcp://node-7.cluster.local:1234"),
    ("ray_head", "tcp://ray_head:1234"),
    ("fd00::5:1", "tcp://[fd00::5:1]:1234"),  # an IPv6 address whose last group looks like a port
    ("fe80::1%eth0", "tcp://[fe80::1%eth0]:1234"),  # with a zone id
    ("head.svc.cluster.local.", "tcp://head.svc.cluster.local.:1234"),  # a fully qualified name
])
def test_host_names_and_ipv6_addresses_still_make_the_url(env, monkeypatch, address, url):
    monkeypatch.setenv("MASTER_ADDR", address)
    monkeypatch.setenv("MASTER_PORT", "1234")
    assert job_impl._init_url() == url


@pytest.mark.parametrize("step, recorded", [
    (2**53, 2**53),
    (2**53 + 1, None),  # float() would round it to 2**53 and record a step that was not reported
    (np.int64(2**53 + 1), None),
    (np.int64(7), 7),
    (torch.tensor(9), 9),
    (12.0, 12),
    (np.True_, None),  # a bool is no step: it was recorded as 1
    (torch.tensor(True), None),
    ("5", None),  # nor is a text: it was recorded as 5
])
def test_a_step_is_checked_and_recorded_exactly(env, step, recorded):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        job.report(step=step)
    assert _report_doc(env)[2] == recorded
    assert type(_report_doc(env)[2]) in (int, type(None))
    assert len([w for w in caught if issubclass(w.category, RuntimeWarning)]) == (recorded is None)
