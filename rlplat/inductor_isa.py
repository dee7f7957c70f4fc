"""torch.compile's check of the CPU's vector instruction sets, once per machine instead of
once per process.

Before inductor (torch.compile's code generator) writes or loads CPU kernels, it checks
which of the vector instruction sets the CPU reports (AVX2, AVX-512, ...) the C++ compiler
can build for: for each one it builds a small library (cached on disk) and starts a Python
process that loads it. On the machines measured here that is 3 processes, and skipping them
saves about 0.5 s of every compiled run: ``rlplat-train algo=ppo env=pendulum
trainer.total_frames=4096 trainer.compile=true`` takes 3.4 s instead of 3.9 s (median of 5,
alternating with runs whose marker, below, was removed first). The answer depends only on
the instruction sets the CPU reports, the compiler and torch.

:func:`skip_repeated_check` keeps the answer: when every instruction set the CPU reports
passed, it leaves a marker in inductor's cache directory, named after those three. A later
process that finds it sets ``torch._inductor.config.cpp.vec_isa_ok = True``: inductor's own
switch (``TORCHINDUCTOR_VEC_ISA_OK=1``) for using the instruction sets the CPU reports
without the check, which then selects the same ones. When one failed, no marker is left and
every run checks, as torch does. A ``TORCHINDUCTOR_VEC_ISA_OK`` the user set is left alone,
and so is every platform but x86-64 Linux (the only one whose check starts processes).
"""

from __future__ import annotations

import hashlib
import platform
import sys
from pathlib import Path

MARKER_DIR = "rlplat-vec-isa"
"""Folder of the markers, in inductor's cache directory (``TORCHINDUCTOR_CACHE_DIR``)."""


def skip_repeated_check() -> bool:
    """Let inductor skip its check of the CPU's instruction sets when an earlier process with
    the same CPU instruction sets, C++ compiler and torch found that all of them work; run
    the check now (inductor's own, cached for this process) and leave the marker when they
    all do.

    Returns:
        True when inductor will use the CPU's instruction sets without checking them again
        in this process (``torch._inductor.config.cpp.vec_isa_ok`` set to True).
    """
    if not sys.platform.startswith("linux") or platform.machine() != "x86_64":
        return False
    from torch._inductor import config, cpu_vec_isa, exc

    if config.cpp.vec_isa_ok is not None:  # TORCHINDUCTOR_VEC_ISA_OK, the user's choice
        return False
    try:
        marker = marker_path()
    except exc.InvalidCxxCompiler:  # no compiler: torch.compile reports it, as it always does
        return False
    if not marker.is_file():
        reported = set(cpu_vec_isa.x86_isa_checker())
        candidates = [
            str(isa) for isa in cpu_vec_isa.supported_vec_isa_list if all(f in reported for f in str(isa).split())
        ]
        if [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()] != candidates:  # the check itself
            return False
        try:
            marker.parent.mkdir(parents=True, exist_ok=True)
            marker.write_text(" ".join(candidates) + "\n")
        except OSError:  # a cache directory it cannot write to: the next process checks again
            pass
    config.cpp.vec_isa_ok = True
    return True


def marker_path() -> Path:
    """The marker for this CPU's reported instruction sets, C++ compiler (``-v`` output) and
    torch version, in inductor's cache directory.

    Raises:
        torch._inductor.exc.InvalidCxxCompiler: when inductor finds no C++ compiler.
    """
    import torch
    from torch._inductor import cpp_builder, cpu_vec_isa
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    compiler = cpp_builder.get_compiler_version_info(cpp_builder.get_cpp_compiler())
    key = "|".join([torch.__version__, compiler, " ".join(sorted(cpu_vec_isa.x86_isa_checker()))])
    return Path(cache_dir()) / MARKER_DIR / hashlib.sha256(key.encode()).hexdigest()[:32]
