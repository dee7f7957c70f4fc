"""When a job of ``rlplat-train`` started: the start of its MLflow run and ``time/startup_s``."""

from __future__ import annotations

import os
import time
from pathlib import Path


def process_start_time() -> float:
    """``time.time()`` at which this process started (Linux /proc, 10 ms resolution);
    elsewhere, when this module was imported."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        started_after_boot = int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22: starttime
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - started_after_boot
        return time.time() - age
    except (OSError, ValueError, IndexError, AttributeError):
        return _IMPORTED


_IMPORTED = time.time()
_jobs_started = 0


def job_start() -> float:
    """When the current job started: its process's start for the first job of a process
    (imports included), else now."""
    global _jobs_started
    _jobs_started += 1
    return process_start_time() if _jobs_started == 1 else time.time()
