"""Where a run's kernels are judged: the device its prompts describe and the label its record keeps.

On this machine both come from its own devices. On a Ray cluster (--executor ray) the driver may
have no GPU at all, so they come from a judge worker on one of the cluster's nodes, and the label
names the cluster's GPUs.
"""
from __future__ import annotations

from kernelevo.agent.prompting import Target, target_for, target_from_info

from .options import OptimizeOptions


def target(options: OptimizeOptions, fmt: str | None) -> Target:
    """What the prompts say kernels are written for."""
    if options.judge.executor != "ray":
        return target_for(options.devices[0], fmt)
    from kernelevo.judge.api import ray_connect, ray_worker_info

    ray_connect(options.judge.ray_address)
    return target_from_info(ray_worker_info("cpu" if options.devices[0] == "cpu" else "cuda"), fmt)


def label(options: OptimizeOptions) -> tuple[str, str, str]:
    """(device name, torch version, CUDA version) the run is recorded with."""
    import torch

    if options.judge.executor == "ray":
        from kernelevo.judge.api import ray_connect, ray_nodes

        ray_connect(options.judge.ray_address)
        found = ray_nodes()
        if options.devices[0] == "cpu":
            return f"ray cluster: {len(found)} nodes, {sum(n['cpus'] for n in found)} CPUs", torch.__version__, ""
        models = sorted({n["gpu_model"] or "GPU" for n in found if n["gpus"]})
        gpus = sum(n["gpus"] for n in found)
        return f"ray cluster: {gpus} GPUs ({', '.join(models)})", torch.__version__, torch.version.cuda or ""
    if options.devices[0] == "cpu":
        return "cpu", torch.__version__, torch.version.cuda or ""
    return torch.cuda.get_device_name(torch.device(options.devices[0])), torch.__version__, torch.version.cuda or ""
