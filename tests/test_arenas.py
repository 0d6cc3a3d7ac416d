"""The worker caps glibc's malloc arenas (sparkops/arenas.py): threads that allocate at once share
ARENAS arenas instead of one each."""

import subprocess
import sys

import pytest

THREADS = """
import ctypes, re, sys, tempfile, threading
from sparkops.arenas import cap_arenas
if sys.argv[1] == "capped":
    assert cap_arenas()
barrier = threading.Barrier(8)
kept = []
def allocate():
    barrier.wait()
    for _ in range(2000):
        kept.append(bytearray(4096))  # past pymalloc's 512 bytes: malloc's own
threads = [threading.Thread(target=allocate) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
with tempfile.TemporaryFile("w+") as out:
    fp = libc.fdopen(out.fileno(), b"w")
    libc.malloc_info(0, ctypes.c_void_p(fp)); libc.fflush(ctypes.c_void_p(fp))
    out.seek(0)
    print(len(re.findall(r'<heap nr="', out.read())))
"""


def _heaps(mode):
    proc = subprocess.run([sys.executable, "-c", THREADS, mode], capture_output=True, text=True, timeout=60, check=True)
    return int(proc.stdout.strip())


def test_threads_allocating_at_once_share_the_capped_arenas():
    if not sys.platform.startswith("linux"):
        pytest.skip("glibc's mallopt")
    uncapped = _heaps("uncapped")
    if uncapped <= 2:
        pytest.skip(f"this machine made {uncapped} arenas for 8 threads uncapped: nothing to cap")
    assert _heaps("capped") <= 2, uncapped
