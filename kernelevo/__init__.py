"""kernelevo: evolve fast, verified CUDA kernels for PyTorch modules."""
__version__ = "0.1.0"
