"""The CPU the driver's unit tests compile for when they run what they build: the x86-64
level this machine runs (x86-64-v4 has AVX-512, v3 AVX2 and FMA), so that a test of
vectorized loops never executes instructions the CPU lacks."""


def _flags():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


# The x86-64 microarchitecture level to pass as `mcpu`.
VECTOR_CPU = "x86-64-v4" if "avx512f" in _flags() else "x86-64-v3"
