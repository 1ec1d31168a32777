"""glibc's allocator, set so that the large tensors of each training step are reused.

glibc serves every block above its mmap threshold (32 MiB at most) with a fresh `mmap`, and each
page of it is faulted in and zeroed again when it is touched: the logits of a step (4,096 x 8,000
floats, 131 MB) and their gradient, every step. With mmap off and the heap never trimmed, freed
blocks stay in the heap and are handed out again, as tcmalloc does. Nothing computed changes;
only where the bytes live. Under another allocator (tcmalloc preloaded) this does nothing.
"""

from __future__ import annotations

import ctypes
import platform

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # mallopt parameters, from glibc's malloc.h


def tune() -> bool:
    """Serve every block from the heap and keep freed memory; True where the allocator accepted
    it (a preloaded tcmalloc accepts mallopt and ignores it)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt  # the process's malloc: glibc's, or a preloaded one's
    return bool(mallopt(M_MMAP_MAX, 0)) and bool(mallopt(M_TRIM_THRESHOLD, 2 ** 31 - 1))
