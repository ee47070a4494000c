"""How long a candidate takes, whether that number can be trusted, and where the time goes.

timing.py times callables interleaved in one process to a stated precision; crosscheck.py checks
the timings themselves (real, complete, uncached work); hold.py gives a CPU timing phase the machine;
resources.py reads the compiler's per-kernel resources; sol.py bounds the work by the device's speed
of light; ncu.py adds Nsight Compute's metrics when ncu is there.
"""
