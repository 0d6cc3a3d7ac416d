"""A day in the life of a box, on a real systemd 252 user manager: does every page stand for an incident?

Two engines as the seed's box runs them, each a user unit of the real `systemd --user` of
tests/realsystemd/harness.py (needs root): "main" (Restart=on-failure, the stop hook) and "embed"
(Restart=no, ordered After= main, its start gated by `sparkops wait-ready`). `sparkops up` (web,
worker, beat) watches both through the real `systemctl --user` and journal and pages a webhook
receiver on loopback. The script runs a day of planned work — restarts, stops and starts,
daemon-reloads, unit fixes applied — interleaved with real faults (an exit 0 after a CUDA error,
a SIGKILL under Restart=on-failure and under Restart=no, a death during a restart, a hang, a
crash loop) and reads every webhook in each step's window.

Printed: pages for planned work (target 0), real faults not paged (target 0), pages per paged
incident (target 1), wrong causes (target 0), warnings (a crash systemd restarts is one, never a
page), exit → webhook median and worst for the deaths that page, and the load average.

    sudo .venv/bin/python bench/day_in_the_life.py [--restarts 10] [--quiet-s 4]

Not in this script: SparkOps's own benchmark, sweep and probe traffic (tests/test_one_install.py
runs a sweep from a second shell against a running stack and checks that nothing is judged as the
operator's) and `sparkops launch` replacing a hand-run process. Uses REDIS_URL if set (else
`sparkops up` starts a private Redis), SQLite under a temp dir unless BENCH_DATABASE_URL is set."""

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from _alerts_stack import PY, ROOT, Receiver, Stack
from _realunit import DyingUnit, healthy, wait_for, wait_stack

from sparkops.redisproc import free_port


@dataclass
class Step:
    name: str
    planned: bool
    expect: str = ""  # "page:<cause>" (one critical page with that cause), "warn:<cause>", "" (nothing)
    hooks: list = field(default_factory=list)
    exited: float | None = None


class Day:
    def __init__(self, quiet_s):
        self.main = DyingUnit("dl-main")
        self.m = self.main.manager
        self.receiver, self.stack = Receiver(), Stack(web_port=free_port())
        self.embed_unit, self.embed_port = f"dl-embed-{os.getpid()}.service", free_port()
        self.embed_url = f"http://127.0.0.1:{self.embed_port}"
        self.steps: list[Step] = []
        self.quiet_s = quiet_s
        self.others = 0  # webhooks about engines that are not this day's (hand-run ones found on the box)

    # --- the box ------------------------------------------------------------------------
    def start(self):
        sock = self.main.root / "stopped.sock"
        hook = f"ExecStopPost={sys.executable} -m sparkops.controls.stopped --socket {sock} %n\n"
        self.main.start(hook + "RestartSec=0.5\nStartLimitBurst=20\n")
        sparkops = str(Path(PY).with_name("sparkops"))
        gate = f"{sparkops} wait-ready --url {self.embed_url} --kind vllm --budget 40"
        self.m.write_unit(
            self.embed_unit,
            f"[Unit]\nDescription=simulated embedding engine\nAfter={self.main.unit}\n"
            f"[Service]\nWorkingDirectory={ROOT}\nEnvironment=PYTHONUNBUFFERED=1 PYTHONPATH={ROOT}\n"
            f"ExecStart={PY} -m simulator.engine --kind vllm --name dl-embed --port {self.embed_port}\n"
            f"ExecStartPost={gate}\nTimeoutStartSec=60\nRestart=no\n{hook}",
        )
        self.m.systemctl("daemon-reload")
        self.m.systemctl("start", self.embed_unit)
        wait_for(lambda: healthy(self.embed_url), 60, "answer from embed")
        self.main.watched_by(self.stack, self.receiver, "day-hook", SPARKOPS_STOP_SOCKET=str(sock))
        self.stack.run(
            "engine", "add", "dl-embed", "--kind", "vllm", "--url", self.embed_url, "--unit", self.embed_unit,
            "--user-unit",
        )  # fmt: skip
        self.stack.start_up()
        wait_stack(self.stack)
        time.sleep(self.quiet_s)  # the probes have seen both engines up

    def stop(self):
        self.stack.stop()
        self.main.stop()

    def main_pid(self, unit=None):
        return int(self.m.show(unit or self.main.unit).get("MainPID") or 0)

    def up(self, url):
        wait_for(lambda: healthy(url), 90, f"answer from {url}")

    # --- steps --------------------------------------------------------------------------
    def step(self, name, planned, expect, action):
        before = len(self.receiver.delivered())
        step = Step(name, planned, expect)
        step.exited = action()
        if expect.startswith(("page:", "warn:")):
            severity = "critical" if expect.startswith("page:") else "warning"
            wait_for(lambda: self._firing(before, severity), 90, f"{expect} for {name}")
        time.sleep(self.quiet_s)  # a page that should not come has its time to come
        hooks = self.receiver.delivered()[before:]
        # The box's own engines: a hand-run engine the scan found (another program's, e.g. a test run
        # beside this bench) is watched too, and its pages are not this day's.
        step.hooks = [h for h in hooks if h["body"].get("engine") in (None, "dl-main", "dl-embed")]
        self.others += len(hooks) - len(step.hooks)
        self.steps.append(step)
        print(f"{len(self.steps):2d} {'planned' if planned else 'fault  '} {name}: {self._said(step)}", flush=True)

    def _firing(self, before, severity):
        return [
            h
            for h in self.receiver.delivered()[before:]
            if h["body"].get("transition") in ("firing", "renotify")
            and h["body"].get("severity") == severity
            and h["body"].get("engine") in ("dl-main", "dl-embed")
        ]

    @staticmethod
    def _said(step):
        said = [
            f"{h['body'].get('transition')} {h['body'].get('severity')} {h['body'].get('rule')}/{h['body'].get('cause')}"
            for h in step.hooks
        ]
        return ", ".join(said) or "nothing"

    def restart(self, unit, url):
        old = self.main_pid(unit)
        self.m.systemctl("restart", unit)
        wait_for(lambda: self.main_pid(unit) not in (0, old), 90, "a new main process")
        self.up(url)

    def stop_start(self, unit, url):
        self.m.systemctl("stop", unit)
        time.sleep(self.quiet_s)  # stopped for a while: the probe sees it down, again and again
        self.m.systemctl("start", unit)
        self.up(url)

    def kill(self, unit, sig=signal.SIGKILL):
        pid = self.main_pid(unit)
        at = time.time()
        os.kill(pid, sig)
        return at

    def exit0(self):
        n = len(self.main.exit_times())
        return self.main.die(n)

    def fix(self, engine, check):
        """`sparkops unit fix ENGINE --check CHECK --apply`, as an operator runs it (its exit code said when not 0)."""
        argv = [PY, "manage.py", "unit", "fix", engine, "--check", check, "--apply"]
        done = subprocess.run(argv, check=False, cwd=ROOT, env=self.stack.env, capture_output=True, text=True)
        if done.returncode:
            print(f"   unit fix {engine} --check {check}: exit {done.returncode}: {done.stderr.strip()[-300:]}")

    def fault(self, url, kind):
        httpx.post(url + "/_sim/fault", json={"kind": kind}, timeout=10)


def day(d, restarts):
    main, embed = d.main.unit, d.embed_unit
    murl, eurl = d.main.url, d.embed_url
    for i in range(restarts):
        d.step(f"systemctl restart main ({i + 1})", True, "", lambda: d.restart(main, murl))
        if i == 2:
            d.step("exit 0 after a CUDA error (main, Restart=on-failure)", False, "page:exit0_no_restart", d.exit0)
            d.step("systemctl start main after the exit 0", True, "", lambda: d.stop_start(main, murl))
        if i == 4:
            d.step(
                "SIGKILL main (Restart=on-failure: systemd restarts it)",
                False,
                "warn:crashed_restarting",
                lambda: d.kill(main),
            )
            d.up(murl)
        if i == 6:
            d.step("systemctl daemon-reload", True, "", lambda: d.m.systemctl("daemon-reload"))
    for i in range(3):
        d.step(f"systemctl stop, then start embed ({i + 1})", True, "", lambda: d.stop_start(embed, eurl))
    d.step("unit fix --check stop_hook --apply (embed)", True, "", lambda: d.fix("dl-embed", "stop_hook"))
    d.step("unit fix --check memory_max_set --apply (main)", True, "", lambda: d.fix("dl-main", "memory_max_set"))
    d.step("systemctl daemon-reload", True, "", lambda: d.m.systemctl("daemon-reload"))
    d.step("restart embed after the fixes", True, "", lambda: d.restart(embed, eurl))
    d.step("SIGKILL embed (Restart=no)", False, "page:unit_failed", lambda: d.kill(embed))
    d.step("systemctl start embed after its death", True, "", lambda: d.stop_start(embed, eurl))

    def death_during_restart():
        old = d.main_pid(main)
        d.m.systemctl("restart", "--no-block", main)
        wait_for(lambda: d.main_pid(main) not in (0, old), 60, "the restart's new process")
        return d.kill(main)

    d.step(
        "a death during a restart (main: systemd restarts it)", False, "warn:crashed_restarting", death_during_restart
    )
    d.up(murl)
    d.step("a hang (main answers nothing)", False, "page:active_not_answering", lambda: d.fault(murl, "hang"))
    d.step("systemctl restart main out of the hang", True, "", lambda: d.restart(main, murl))

    def crash_loop():
        at = None
        for _ in range(3):
            d.up(murl)
            at = d.kill(main)
        return at

    d.step("a crash loop (main killed 3 times)", False, "page:restart_loop", crash_loop)
    d.up(murl)


def report(d):
    planned_pages = sum(
        1 for s in d.steps if s.planned for h in s.hooks
        if h["body"].get("transition") in ("firing", "renotify") and h["body"].get("severity") == "critical"
    )  # fmt: skip
    faults = [s for s in d.steps if not s.planned]
    not_paged = wrong = 0
    per_incident, latencies = [], []
    for s in faults:
        kind, cause = s.expect.split(":")
        severity = "critical" if kind == "page" else "warning"
        fired = [
            h for h in s.hooks
            if h["body"].get("transition") in ("firing", "renotify") and h["body"].get("severity") == severity
        ]  # fmt: skip
        pages = [
            h
            for h in s.hooks
            if h["body"].get("transition") in ("firing", "renotify") and h["body"].get("severity") == "critical"
        ]
        if kind == "page":
            if not pages:
                not_paged += 1
            else:
                per_incident.append(len(pages))
                if s.exited is not None:
                    latencies.append(pages[0]["at"] - s.exited)
        elif pages:
            wrong += 1  # a crash systemd restarts paged someone
        if fired and fired[0]["body"].get("cause") != cause:
            wrong += 1
    warnings = sum(
        1 for s in d.steps for h in s.hooks if h["body"].get("transition") == "firing" and h["body"].get("severity") == "warning"
    )  # fmt: skip
    print(f"\nsteps: {len(d.steps)} ({len(d.steps) - len(faults)} planned, {len(faults)} faults)")
    print(f"pages for planned work: {planned_pages}  (target 0)")
    print(f"real faults not paged: {not_paged}  (target 0)")
    print(f"pages per paged incident: {per_incident}  (target 1 each)")
    print(f"wrong causes (or a crash systemd restarted that paged): {wrong}  (target 0)")
    print(f"warnings (crashes systemd restarted): {warnings}")
    if d.others:
        print(f"webhooks about other engines found on the box (hand-run), not counted: {d.others}")
    if latencies:
        print(
            f"exit → webhook for the deaths that page: median {statistics.median(latencies):.3f} s, "
            f"worst {max(latencies):.3f} s ({len(latencies)} deaths)"
        )
    print(
        "load average (1, 5, 15 min): " + " ".join(f"{x:.2f}" for x in os.getloadavg()) + f"  ({os.cpu_count()} CPUs)"
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--restarts", type=int, default=10)
    parser.add_argument(
        "--quiet-s", type=float, default=4.0, help="how long each step waits for pages that should not come"
    )
    args = parser.parse_args()
    d = Day(args.quiet_s)
    try:
        d.start()
        day(d, args.restarts)
        report(d)
    finally:
        d.stop()


if __name__ == "__main__":
    main()
