"""GPU energy through NVML (pynvml, from the nvidia-ml-py package): average power and energy per request.

Reads the board's cumulative energy counter (Volta and newer) around each frame; where the counter is missing it
falls back to instantaneous power times the frame's duration. On CPU devices, or without NVML, there is no meter and
the energy fields of the results stay null.
"""
from __future__ import annotations

import torch


class EnergyMeter:
    def __init__(self, device: torch.device | str) -> None:
        import pynvml

        self._nvml = pynvml
        pynvml.nvmlInit()
        index = torch.device(device).index
        self.handle = _handle(pynvml, torch.cuda.current_device() if index is None else index)
        self.name = pynvml.nvmlDeviceGetName(self.handle)
        try:
            pynvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
            self.method = "energy_counter"
        except pynvml.NVMLError:
            self.method = "power_samples"

    def mark(self) -> float:
        """Millijoules since an arbitrary origin (energy counter), or the power draw in mW (fallback)."""
        if self.method == "energy_counter":
            return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))
        return float(self._nvml.nvmlDeviceGetPowerUsage(self.handle))

    def joules(self, start: float, end: float, seconds: float) -> float:
        """Energy between two marks taken `seconds` apart."""
        if self.method == "energy_counter":
            return (end - start) / 1e3
        return 0.5 * (start + end) / 1e3 * seconds

    def close(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except self._nvml.NVMLError:
            pass


def _handle(pynvml, cuda_index: int):
    """NVML's handle for a CUDA device: by PCI bus id (CUDA and NVML may number devices differently, e.g. under
    CUDA_VISIBLE_DEVICES), else by index."""
    props = torch.cuda.get_device_properties(cuda_index)
    bus = getattr(props, "pci_bus_id", None)
    if bus is not None:
        pci = f"{getattr(props, 'pci_domain_id', 0):08x}:{bus:02x}:{getattr(props, 'pci_device_id', 0):02x}.0"
        try:
            return pynvml.nvmlDeviceGetHandleByPciBusId(pci)
        except pynvml.NVMLError:
            pass
    return pynvml.nvmlDeviceGetHandleByIndex(cuda_index)


def open_meter(device: torch.device | str) -> tuple[EnergyMeter | None, str]:
    """(meter, why not) for `device`: a meter on CUDA when pynvml works, else None and the reason."""
    if torch.device(device).type != "cuda":
        return None, "not a CUDA device"
    try:
        return EnergyMeter(device), ""
    except ImportError:
        return None, "pynvml is not installed (pip install nvidia-ml-py)"
    except Exception as e:  # noqa: BLE001 - NVML errors have many types; the run goes on without energy
        return None, f"NVML unavailable: {e}"
