"""The reference as the judge timed it on a device (Judge.baseline): what a search must beat, read by field.

The judge keeps the whole measurement (`data`, the JSON its cache holds); a search reads the figures it needs here:
eager's and torch.compile's medians, the kernels each launched, the speed of light and its peaks, the warnings of a
degenerate task.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

KernelRow = tuple[str, float, float]  # a kernel's name, its launches per call and its ms per call


@dataclass(frozen=True)
class Baseline:
    """The reference's figures on one device: `eager_ms` and `compiled_ms` (None where torch.compile was not
    measured or failed: `compile_error` says why), the kernels of each, the task's kind, its speed of light (`sol`:
    bound_ms, memory_ms, which peaks it used), the warnings that the task is degenerate, and the whole record."""

    eager_ms: float | None = None
    compiled_ms: float | None = None
    eager_kernels: tuple[KernelRow, ...] = ()
    compiled_kernels: tuple[KernelRow, ...] = ()
    kind: str = ""
    sol: dict[str, Any] = field(default_factory=dict)
    compile_error: str = ""
    warnings: tuple[str, ...] = ()
    device_name: str = ""
    torch_version: str = ""
    data: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, data: dict[str, Any]) -> "Baseline":
        """From the judge's record of a baseline job that passed."""
        timed, kernels = data.get("timing") or {}, data.get("kernels") or {}

        def median(side: str) -> float | None:
            return (timed.get(side) or {}).get("median_ms")

        def rows(side: str) -> tuple[KernelRow, ...]:
            return tuple((k["name"], k["launches"], k["ms"]) for k in kernels.get(side) or ())

        return cls(median("eager"), median("compiled"), rows("eager"), rows("compiled"), data.get("kind") or "",
                   data.get("sol") or {}, data.get("compile_error") or "",
                   tuple(w.get("message", "") for w in data.get("warnings") or ()), data.get("device_name") or "",
                   data.get("torch_version") or "", data)

    @property
    def bound_ms(self) -> float | None:
        """The speed of light's time for one call (None where not measured)."""
        return self.sol.get("bound_ms")

    @property
    def memory_ms(self) -> float | None:
        """The floor of any kernel: its bytes moved once at the calibrated bandwidth."""
        return self.sol.get("memory_ms")
