"""Child-process supervision for `sparkops up`: start, watch, stop in reverse order."""
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field


@dataclass
class Child:
    name: str
    argv: list
    env: dict = field(default_factory=dict)
    proc: subprocess.Popen = None

    def start(self, base_env):
        # A session of its own: Ctrl-C reaches only `up`, which then stops children in order.
        self.proc = subprocess.Popen(self.argv, env={**base_env, **self.env}, start_new_session=True)
        return self

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def exited(self):
        return self.proc is not None and self.proc.poll() is not None

    def stop(self, timeout=10.0):
        if self.proc is None or self.proc.poll() is not None:
            return
        _signal_group(self.proc, signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _signal_group(self.proc, signal.SIGKILL)
            self.proc.wait()


def _signal_group(proc, sig):
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


class Supervisor:
    def __init__(self, out=sys.stdout):
        self.children = []
        self.out = out
        self._stopping = False

    def start(self, child, base_env):
        self.children.append(child.start(base_env))
        self.out.write(f"started {child.name} (pid {child.pid})\n")
        self.out.flush()
        return child

    def request_stop(self, *_):
        self._stopping = True

    def watch(self, interval=0.5):
        """Block until asked to stop or a child dies; return the dead child or None."""
        while not self._stopping:
            for child in self.children:
                if child.exited():
                    return child
            time.sleep(interval)
        return None

    def stop_all(self):
        for child in reversed(self.children):
            child.stop()
            self.out.write(f"stopped {child.name}\n")
        self.out.flush()
