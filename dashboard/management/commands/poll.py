"""`sparkops poll --once [--json]`: run every collector once, store the readings, print them."""

import json
import time
from argparse import ArgumentParser
from typing import Any

from django.conf import settings

from dashboard.management.base import CliCommand
from sparkops.poller.entrypoints import poll_once


class Command(CliCommand):
    help = "Run every collector (this host's sources, then every engine), store and print the readings."

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--once", action="store_true", help="One cycle, then exit (default: loop every interval).")
        parser.add_argument("--json", action="store_true", help="Print one JSON object per cycle.")
        parser.add_argument("--host", default=None, help="This host's name (default SPARKOPS_HOST_NAME).")

    def handle(self, *args: Any, **opts: Any) -> None:
        while True:
            started = time.monotonic()
            result = poll_once(host_name=opts["host"])
            self.stdout.write(json.dumps(result, default=str) if opts["json"] else self.summary(result))
            if opts["once"]:
                return
            time.sleep(max(0.0, settings.SPARKOPS_POLL_INTERVAL - (time.monotonic() - started)))

    @staticmethod
    def summary(result):
        lines = [f"poll at {result['time']}"]
        for e in result["engines"]:
            state = e["status"] + (f" ({e['error']})" if e["error"] else "")
            lines.append(
                f"  engine {e['name']:<20} {e['kind']:<9} {state}  running={e['requests_running']} "
                f"waiting={e['requests_waiting']} kv={e['kv_cache_usage']} hit={e['prefix_cache_hit_rate']}"
            )
        h = result["host"]
        psi = (h.get("psi") or {}).get("memory", {}).get("some", {})
        lines.append(
            f"  host mem_available={h.get('mem_available_bytes')} swap_used={h.get('swap_used_bytes')} "
            f"psi.memory.some.avg10={psi.get('avg10')} {h.get('psi_error') or ''}".rstrip()
        )
        gs = result["gpu_state"]
        lines.append(f"  gpus: {gs['state']} {gs['reason']}".rstrip())
        for g in result["gpus"]:
            lines.append(
                f"    gpu{g['index']} {g['name']} sm={g['sm_clock_mhz']}/{g['sm_clock_max_mhz']} MHz "
                f"{g['pstate']} util={g['utilization_pct']}% {g['power_w']} W reasons={g['clocks_event_reasons']}"
            )
        p = result["processes"]
        lines.append(f"  compilers={p['compilers']} rss={p['compilers_rss_bytes']}")
        return "\n".join(lines)
