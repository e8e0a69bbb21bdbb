"""A machine probe's key besides the file: the hardware class, the runtime and the speed flags.

What a model costs is the machine's (its CPU and GPUs, where the layers are placed), the
build's (another llama.cpp build, another cost) and the flags' (threads, GPU layers); the key
names all three the way the rest of specreg names them (servers/hardware.py's class, the
bundled release or the binary's SHA-256, the `-t`/`-ngl` flags `server_args` gives), so a probe
taken by `drafts` is found again by `runs show` from a run's manifest. Light: nothing is started
and no server module is loaded to make a key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from specreg.servers.hardware import hardware_class

if TYPE_CHECKING:
    from specreg.schemas.bench import RunManifest, RuntimeInfo
    from specreg.servers.launcher import ServerCommand
    from specreg.servers.memory import GpuProbe
    from specreg.servers.pinning import Pinning


@dataclass(frozen=True)
class MachineKey:
    """What a probe is valid for besides the file: the hardware class, the runtime, the speed flags."""

    hardware: str
    runtime: str
    flags: tuple[str, ...] = ()

    def text(self) -> str:
        flags = " ".join(self.flags) or "default threads"
        return f"{self.hardware}; {self.runtime}; {flags}"


def runtime_key(cmd: ServerCommand) -> str:
    """The bundled server's xllamacpp release (from package metadata: nothing is loaded), or an
    external binary's SHA-256: a rebuilt binary is another runtime even when its version is not."""
    if cmd.kind == "bundled":
        from specreg.servers.identity import bundled_version

        return f"bundled xllamacpp {bundled_version() or 'unknown'}"
    from specreg.registry.hashing import sha256_file

    return f"external {sha256_file(cmd.path)}"


def runtime_key_of(info: RuntimeInfo) -> str:
    """`runtime_key` of the server a run's manifest names."""
    if info.kind == "bundled":
        return f"bundled xllamacpp {info.xllamacpp_version or 'unknown'}"
    return f"external {info.sha256 or info.path}"


def speed_flags(threads: int | None, gpu_layers: str | None) -> tuple[str, ...]:
    """The flags that change a model's speed, as `server_args` gives them."""
    out: tuple[str, ...] = ()
    if threads is not None:
        out += ("-t", str(threads), "-tb", str(threads))
    if gpu_layers is not None:
        out += ("-ngl", gpu_layers)
    return out


def machine_key(
    cmd: ServerCommand, pinning: Pinning, gpu_layers: str | None = None, gpu: GpuProbe | None = None
) -> MachineKey:
    """This machine's key for servers started by `cmd` with these threads and GPU layers."""
    from specreg.servers.memory import GpuProbe
    from specreg.servers.runtime import hardware_info

    hw = hardware_info(gpu or GpuProbe(), gpu_layers).model_dump(mode="json")
    return MachineKey(hardware_class(hw) or "unknown", runtime_key(cmd), speed_flags(pinning.threads, gpu_layers))


def key_of_run(m: RunManifest) -> MachineKey:
    """The key of the machine, build and flags a run was measured on (its manifest)."""
    hw = hardware_class(m.hardware.model_dump(mode="json")) or "unknown"
    gpu_layers = m.settings.gpu_layers if m.settings else None
    return MachineKey(hw, runtime_key_of(m.runtime), speed_flags(m.observation.threads, gpu_layers))
