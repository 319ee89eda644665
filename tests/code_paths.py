"""Run a command with the CPU's default numerical code paths or with the AVX2 ones forced.

float32 results differ between CPUs in their last bits: torch's ATen kernels, oneDNN, MKL (torch's
BLAS), OpenBLAS and numpy's own loops each pick AVX-512 or AVX2 code at run time, with other
vector widths and blockings, so other summation orders. CI runs on Intel machines with AVX-512 and
on AMD machines with AVX2 only; the suite's numerical tests run both ways on one machine (`make
test`), so either kind of machine catches what the other would. On a machine without AVX-512 the
two runs take the same paths.

    python tests/code_paths.py avx2 python -m pytest -m numerics
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

# Each library's own switch down to AVX2 (all read when the library loads).
AVX2 = {
    "ATEN_CPU_CAPABILITY": "avx2",  # torch's vectorised ATen kernels
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # oneDNN (torch's convolutions, some matmuls)
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",  # MKL, torch's BLAS on x86
    "OPENBLAS_CORETYPE": "Haswell",  # numpy's BLAS: the AVX2 kernels
}
# numpy's dispatched loops; it may only be told to leave out features the CPU has.
NUMPY_AVX512 = {"NPY_DISABLE_CPU_FEATURES": "X86_V4 AVX512_ICL AVX512_SPR"}

CODE_PATHS = ("default", "avx2")


def has_avx512() -> bool:
    cpuinfo = Path("/proc/cpuinfo")
    return cpuinfo.exists() and " avx512f" in cpuinfo.read_text()


def environment(paths: str) -> dict[str, str]:
    """The environment variables that select `paths` ("default": none)."""
    if paths not in CODE_PATHS:
        raise ValueError(f"code paths {paths!r}: expected one of {', '.join(CODE_PATHS)}")
    if paths == "default":
        return {}
    return {**AVX2, **(NUMPY_AVX512 if has_avx512() else {})}


def main(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] not in CODE_PATHS:
        sys.exit(f"usage: python tests/code_paths.py {{{','.join(CODE_PATHS)}}} COMMAND [ARG ...]")
    env = {**os.environ, **environment(argv[0])}
    os.execvpe(argv[1], argv[1:], env)


if __name__ == "__main__":
    main(sys.argv[1:])
