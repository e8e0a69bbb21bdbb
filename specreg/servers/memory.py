"""Peak memory of a server process tree (psutil) and the GPU view (NVML), sampled in a thread.

The peak RSS is the higher of the sampled sums and the kernel's own high-water marks (Linux
VmHWM, summed over the tree), so a peak while loading, before the first sample, is not missed.

No NVIDIA GPU (no driver, no library, no device) is recorded as absent with NVML's reason,
never as 0 bytes. `nvml` is injectable so the parsing of real NVML values can be tested
without a GPU; everything else here is exercised for real.
"""

from __future__ import annotations

import contextlib
import importlib
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import psutil

from specreg.schemas.bench import GpuDevice, GpuObservation, MemoryObservation


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _fold(op: Callable[[int, int], int], old: int | None, new: int) -> int:
    return new if old is None else op(old, new)


class GpuProbe:
    """NVML, opened once; `present` is False (with `reason`) when no NVIDIA GPU can be used."""

    def __init__(self, nvml: ModuleType | Any = None) -> None:
        self.present = False
        self.reason: str | None = None
        self.driver: str | None = None
        self._devices: list[GpuDevice] = []
        self._handles: list[Any] = []
        try:
            if nvml is None:
                nvml = importlib.import_module("pynvml")  # nvidia-ml-py
            self._nvml = nvml
            nvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound / DriverNotLoaded / ImportError
            self.reason = f"NVML unavailable: {_text(exc) or type(exc).__name__}"
            return
        try:
            self.driver = _text(nvml.nvmlSystemGetDriverVersion())
            count = int(nvml.nvmlDeviceGetCount())
            for i in range(count):
                h = nvml.nvmlDeviceGetHandleByIndex(i)
                mem = nvml.nvmlDeviceGetMemoryInfo(h)
                self._handles.append(h)
                self._devices.append(
                    GpuDevice(index=i, name=_text(nvml.nvmlDeviceGetName(h)), memory_total_bytes=int(mem.total))
                )
        except Exception as exc:
            self.reason = f"NVML error: {_text(exc) or type(exc).__name__}"
            self.close()
            return
        if not self._devices:
            self.reason = "NVML reports no GPU devices"
            self.close()
            return
        self.present = True

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()

    def observation(self) -> GpuObservation:
        """Static facts (no per-run peaks)."""
        return GpuObservation(
            present=self.present,
            reason=self.reason,
            driver=self.driver,
            devices=[d.model_copy() for d in self._devices],
        )

    def sample(self, pids: set[int], devices: list[GpuDevice], vram: dict[int, int]) -> None:
        """Fold one sample into `devices` (max temperature, min clocks) and `vram` (peak per pid)."""
        nvml = self._nvml
        for dev, h in zip(devices, self._handles, strict=False):
            try:
                t = int(nvml.nvmlDeviceGetTemperature(h, nvml.NVML_TEMPERATURE_GPU))
                dev.temperature_c_max = _fold(max, dev.temperature_c_max, t)
                sm = int(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_SM))
                dev.sm_clock_mhz_min = _fold(min, dev.sm_clock_mhz_min, sm)
                mc = int(nvml.nvmlDeviceGetClockInfo(h, nvml.NVML_CLOCK_MEM))
                dev.mem_clock_mhz_min = _fold(min, dev.mem_clock_mhz_min, mc)
            except Exception:
                pass  # some boards do not report clocks/temperature; leave None
            try:
                procs = nvml.nvmlDeviceGetComputeRunningProcesses(h)
            except Exception:
                continue
            for p in procs:
                used = getattr(p, "usedGpuMemory", None)  # None: not available (e.g. MIG, WDDM)
                if p.pid in pids and used is not None:
                    vram[p.pid] = max(vram.get(p.pid, 0), int(used))


def _high_water_mark(pid: int) -> int | None:
    """Peak RSS of a live process so far (Linux VmHWM); None where /proc does not say."""
    try:
        with open(f"/proc/{pid}/status", "rb") as f:
            for line in f:
                if line.startswith(b"VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class MemorySampler:
    """Samples a process tree's RSS (and GPU) every `interval_s` until stopped; keeps peaks."""

    def __init__(self, pids: Callable[[], list[int]], gpu: GpuProbe, interval_s: float = 0.05) -> None:
        self._pids = pids
        self._gpu = gpu
        self._interval = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="specreg-memory", daemon=True)
        self.peak_rss = 0
        self.samples = 0
        self._devices = [d.model_copy() for d in gpu.observation().devices]
        self._vram: dict[int, int] = {}
        self._peak_vram_total = 0

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self._thread.is_alive():
            self._stop.set()
            self._thread.join(timeout=5)

    def sample_once(self) -> None:
        pids = self._pids()
        rss = 0
        hwm = 0
        for pid in pids:
            try:
                rss += psutil.Process(pid).memory_info().rss
            except psutil.Error:
                continue
            hwm += _high_water_mark(pid) or 0
        if pids and rss:
            # the kernel's high-water mark also sees what no sample caught (the load's transient
            # metadata, a burst between samples); summed over the tree it can only be higher
            self.peak_rss = max(self.peak_rss, rss, hwm)
            self.samples += 1
        if self._gpu.present:
            now: dict[int, int] = {}
            self._gpu.sample(set(pids), self._devices, now)
            for pid, used in now.items():
                self._vram[pid] = max(self._vram.get(pid, 0), used)
            self._peak_vram_total = max(self._peak_vram_total, sum(now.values()))

    def _run(self) -> None:
        while True:
            self.sample_once()
            if self._stop.wait(self._interval):
                self.sample_once()  # one last look before stopping
                return

    def result(self) -> MemoryObservation:
        base = self._gpu.observation()
        if base.present:
            base.devices = self._devices
            base.peak_vram_bytes = self._peak_vram_total
            base.peak_vram_by_pid = dict(self._vram)
        return MemoryObservation(peak_rss_bytes=self.peak_rss or None, samples=self.samples, gpu=base)


def higher_peak(a: MemoryObservation | None, b: MemoryObservation) -> MemoryObservation:
    """The higher peak of two server starts of one condition (rounds)."""
    if a is None:
        return b
    rss = max(a.peak_rss_bytes or 0, b.peak_rss_bytes or 0) or None
    gpu = b.gpu if (b.gpu.peak_vram_bytes or 0) >= (a.gpu.peak_vram_bytes or 0) else a.gpu
    return MemoryObservation(peak_rss_bytes=rss, samples=a.samples + b.samples, gpu=gpu)
