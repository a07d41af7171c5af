"""Per-GPU PCIe and NVLink traffic and GPU busy fraction through NVML (``nvidia-ml-py``).

What is read, per GPU ``K`` (links ``gpuK/pcie`` and ``gpuK/nvlink``, gauge ``gpuK/util``):

- PCIe: the cumulative byte counters ``NVML_FI_DEV_PCIE_COUNT_{TX,RX}_BYTES`` when the driver
  serves them (recent drivers; a counter costs nothing to read), else
  ``nvmlDeviceGetPcieThroughput`` (TX/RX in KB/s, taken as KiB/s; NVML measures it over ~20 ms
  and the call blocks for that long, twice per GPU per sample). Capacity: ``pcie_gbps`` if
  given, else the maximum link generation x width NVML reports (per-lane payload rate after
  line coding), else unknown.
- NVLink: ``NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_{TX,RX}`` with scope ``UINT_MAX`` (all links),
  cumulative KiB of payload. Capacity: ``nvlink_gbps`` (the topology spec's per-GPU NVLink
  bandwidth) if given, else active links x ``NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON`` (MB/s per
  link and direction). GPUs without NVLink (or drivers without the fields) have no nvlink link.
- ``nvmlDeviceGetUtilizationRates(h).gpu / 100``.

``nvml`` is the module to use (tests pass a fake); an ``NVMLError`` from ``nvmlInit`` (no
driver, no library, no GPU) makes the probe unavailable with NVML's message as the reason.
``nvmlDeviceGetFieldValues`` can succeed while one field carries its own error (its value then
means nothing, often 0): that GPU's link is left out of the sample, so the sampler has no
previous reading of it and the next good sample starts a fresh interval, instead of a 0 read as
a counter reset followed by the whole since-boot count as one interval's traffic.

One GPU's NVML error costs only that GPU: a GPU whose handle cannot be had at detection (fallen
off the bus) is left out of the probe (:attr:`NvmlProbe.lost` says why), one with neither PCIe
counter fields nor a working ``nvmlDeviceGetPcieThroughput`` has no ``pcie`` link, and a GPU
whose read raises during a sample is left out of that sample (the others are kept; only when
every GPU's read fails is the sample a :class:`ProbeError`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from deepshare.agents.probes.base import Clock, Probe, ProbeError
from deepshare.agents.samples import LinkReading, ProbeSample

ALL_LINKS = 0xFFFFFFFF
"""NVML scope id meaning "summed over every NVLink link"."""
KIB = 1024
log = logging.getLogger(__name__)
PCIE_LANE_BYTES_PER_S = {1: 250e6, 2: 500e6, 3: 8e9 / 8 * 128 / 130, 4: 16e9 / 8 * 128 / 130,
                         5: 32e9 / 8 * 128 / 130, 6: 64e9 / 8 * 242 / 256}
"""Payload bandwidth of one PCIe lane per direction, by generation (8b/10b, 128b/130b, FLIT)."""
_VALUE_ATTR = {0: "dVal", 1: "uiVal", 2: "ulVal", 3: "ullVal", 4: "sllVal", 5: "siVal", 6: "usVal"}


def field_value(fv: Any) -> float:
    """The number in an ``nvmlFieldValue_t``, by its ``valueType``."""
    return getattr(fv.value, _VALUE_ATTR.get(int(fv.valueType), "ullVal"))


@dataclass
class _Gpu:
    index: int
    handle: Any
    fields: list[Any]
    """Field ids read every sample: PCIe counters (2, optional) then NVLink counters (2, optional)."""
    pcie_counters: bool
    pcie_throughput: bool
    """No counters, but ``nvmlDeviceGetPcieThroughput`` answered at detection (neither: no pcie link)."""
    nvlink: bool
    pcie_capacity: float | None
    nvlink_capacity: float | None


class NvmlProbe(Probe):
    """PCIe/NVLink bytes/s and utilisation per GPU, GPU busy fraction as a gauge."""

    name = "nvml"

    def __init__(
        self,
        nvml: Any = None,
        pcie_gbps: float | None = None,
        nvlink_gbps: float | None = None,
        clock: Clock = time.monotonic,
    ) -> None:
        super().__init__(clock)
        self._gpus: list[_Gpu] = []
        self.lost: dict[int, str] = {}
        """GPUs left out at detection (NVML index -> NVML's error), the others probed as usual."""
        self._initialised = False
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError:
                self._unavailable("nvidia-ml-py (module pynvml) is not installed")
                return
        self._nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            self._unavailable(f"NVML cannot start: {exc}")
            return
        self._initialised = True
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            self._unavailable(f"NVML cannot list GPUs: {exc}")
            count = 0
        for i in range(count):
            try:
                self._gpus.append(self._detect(i, pcie_gbps, nvlink_gbps))
            except nvml.NVMLError as exc:  # one GPU lost (fallen off the bus): probe the others
                self.lost[i] = str(exc)
                log.warning("nvml probe: GPU %d left out: %s", i, exc)
        if self.available and not self._gpus:
            if self.lost:
                first = min(self.lost)
                self._unavailable(f"NVML cannot list GPUs: GPU {first}: {self.lost[first]}")
            else:
                self._unavailable("NVML sees no GPU")
        if not self.available:
            self.close()

    # -- detection ---------------------------------------------------------------------------
    def _ok(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)``, or ``None`` when NVML says the GPU or driver does not support it."""
        try:
            return fn(*args)
        except self._nvml.NVMLError:
            return None

    def _fields_ok(self, handle: Any, fields: list[Any]) -> bool:
        values = self._ok(self._nvml.nvmlDeviceGetFieldValues, handle, fields)
        return values is not None and all(v.nvmlReturn == self._nvml.NVML_SUCCESS for v in values)

    def _detect(self, index: int, pcie_gbps: float | None, nvlink_gbps: float | None) -> _Gpu:
        nv = self._nvml
        handle = nv.nvmlDeviceGetHandleByIndex(index)
        pcie_fields = [getattr(nv, "NVML_FI_DEV_PCIE_COUNT_TX_BYTES", None), getattr(nv, "NVML_FI_DEV_PCIE_COUNT_RX_BYTES", None)]
        pcie_counters = None not in pcie_fields and self._fields_ok(handle, pcie_fields)
        pcie_throughput = not pcie_counters and \
            self._ok(nv.nvmlDeviceGetPcieThroughput, handle, nv.NVML_PCIE_UTIL_TX_BYTES) is not None
        link_fields = [(getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", None), ALL_LINKS),
                       (getattr(nv, "NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", None), ALL_LINKS)]
        nvlink = all(f is not None for f, _ in link_fields) and self._fields_ok(handle, link_fields)
        active = 0
        if nvlink:
            for link in range(getattr(nv, "NVML_NVLINK_MAX_LINKS", 18)):
                active += self._ok(nv.nvmlDeviceGetNvLinkState, handle, link) == nv.NVML_FEATURE_ENABLED
            nvlink = active > 0
        fields = (pcie_fields if pcie_counters else []) + (link_fields if nvlink else [])
        return _Gpu(index, handle, fields, pcie_counters, pcie_throughput, nvlink,
                    self._pcie_capacity(handle, pcie_gbps), self._nvlink_capacity(handle, active, nvlink_gbps))

    def _pcie_capacity(self, handle: Any, gbps: float | None) -> float | None:
        if gbps is not None:
            return gbps * 1e9 / 8
        gen = self._ok(self._nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle)
        width = self._ok(self._nvml.nvmlDeviceGetMaxPcieLinkWidth, handle)
        if gen not in PCIE_LANE_BYTES_PER_S or not width:
            return None
        return PCIE_LANE_BYTES_PER_S[gen] * width

    def _nvlink_capacity(self, handle: Any, active: int, gbps: float | None) -> float | None:
        if gbps:
            return gbps * 1e9 / 8
        if not active:
            return None
        speed = getattr(self._nvml, "NVML_FI_DEV_NVLINK_SPEED_MBPS_COMMON", None)
        values = None if speed is None else self._ok(self._nvml.nvmlDeviceGetFieldValues, handle, [speed])
        if not values or values[0].nvmlReturn != self._nvml.NVML_SUCCESS:
            return None
        mbps = field_value(values[0])
        return active * mbps * 1e6 if mbps > 0 else None

    @property
    def gpus(self) -> int:
        return len(self._gpus)

    # -- sampling ----------------------------------------------------------------------------
    def _pair(self, values: list[Any]) -> tuple[float, float] | None:
        """``(tx, rx)`` from the first two field values, or ``None`` when NVML reports an error
        for either (a per-field ``nvmlReturn``; the call itself succeeded)."""
        if any(v.nvmlReturn != self._nvml.NVML_SUCCESS for v in values[:2]):
            return None
        return field_value(values[0]), field_value(values[1])

    def _read(self) -> ProbeSample:
        nv = self._nvml
        links: dict[str, LinkReading] = {}
        gauges: dict[str, float] = {}
        now = self.clock()
        failed = None
        read = 0
        for gpu in self._gpus:
            try:
                self._read_gpu(gpu, links, gauges)
            except nv.NVMLError as exc:  # only this GPU is left out of the sample
                failed = failed or exc
                continue
            read += 1
        if failed is not None and not read:
            raise ProbeError(f"NVML read failed: {failed}") from failed
        return ProbeSample(now, links, gauges)

    def _read_gpu(self, gpu: _Gpu, links: dict[str, LinkReading], gauges: dict[str, float]) -> None:
        """Add one GPU's links and gauge, all or (on an ``NVMLError``, raised) none of them."""
        nv = self._nvml
        mine: dict[str, LinkReading] = {}
        values = list(nv.nvmlDeviceGetFieldValues(gpu.handle, gpu.fields)) if gpu.fields else []
        if gpu.pcie_counters:
            pair = self._pair(values)
            if pair is not None:  # else left out of this sample (see the module docstring)
                tx, rx = pair
                mine[f"gpu{gpu.index}/pcie"] = LinkReading(rx, tx, capacity_bytes_per_s=gpu.pcie_capacity)
            values = values[2:]
        elif gpu.pcie_throughput:
            tx = nv.nvmlDeviceGetPcieThroughput(gpu.handle, nv.NVML_PCIE_UTIL_TX_BYTES) * KIB
            rx = nv.nvmlDeviceGetPcieThroughput(gpu.handle, nv.NVML_PCIE_UTIL_RX_BYTES) * KIB
            mine[f"gpu{gpu.index}/pcie"] = LinkReading(rx, tx, "rate", capacity_bytes_per_s=gpu.pcie_capacity)
        pair = self._pair(values) if gpu.nvlink else None
        if pair is not None:
            tx, rx = pair
            mine[f"gpu{gpu.index}/nvlink"] = LinkReading(
                rx, tx, unit_bytes=KIB, capacity_bytes_per_s=gpu.nvlink_capacity
            )
        util = self._ok(nv.nvmlDeviceGetUtilizationRates, gpu.handle)
        links.update(mine)
        if util is not None:
            gauges[f"gpu{gpu.index}/util"] = util.gpu / 100.0

    def close(self) -> None:
        if self._initialised:
            self._initialised = False
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError:
                pass
