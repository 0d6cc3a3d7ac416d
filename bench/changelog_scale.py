"""The change log at the field report's size (issue 14, item 5): a generated log of ~600
entries and 150 corrections over four months (sparkops/changelog/samplelog.py: flags, claims
with predictions, code fences, corrections of both kinds, engines long retired) is imported
into an empty database, exported, and the timeline is read with its filters and text search.

Prints the import and export wall times (targets: import ≤ 3 s, export ≤ 1 s) and, per
timeline request, the server time of the view (the whole Django request: middleware, queries,
template; median of --repeat) against the 200 ms target. Runs on the database DATABASE_URL
names (PostgreSQL: full-text search with a GIN-indexed tsvector; unset: SQLite with FTS5), in
a throwaway test database it creates and drops.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres .venv/bin/python bench/changelog_scale.py
    .venv/bin/python bench/changelog_scale.py            # SQLite
"""

import argparse
import os
import statistics
import sys
import tempfile
import time

from django.contrib.auth import get_user_model

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sparkops.settings")
os.environ.setdefault("SPARKOPS_TEST_DB_NAME", "sparkops_clog_bench")
if not os.environ.get("DATABASE_URL"):
    os.environ.setdefault("SPARKOPS_VAR_DIR", tempfile.mkdtemp(prefix="sparkops-clog-bench-"))

import django

django.setup()

from django.db import connection  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import CaptureQueriesContext, setup_test_environment  # noqa: E402

from sparkops.changelog.export import export_markdown  # noqa: E402
from sparkops.changelog.importer import import_log  # noqa: E402
from sparkops.changelog.samplelog import generate  # noqa: E402

REQUESTS = [
    ("timeline, page 1", "/changelog/"),
    ("timeline, page 8", "/changelog/?page=8"),
    ("engine q38", "/changelog/?engine=q38"),
    ("kind claim, one month", "/changelog/?kind=claim&start=2026-06-01&end=2026-06-30"),
    ("has corrections", "/changelog/?corrected=yes"),
    ("text: 'compile storm'", "/changelog/?q=compile+storm"),
    ("text: 'max-model-len' on nemotron", "/changelog/?q=max-model-len&engine=nemotron"),
    ("text: prefix 'prefi'", "/changelog/?q=prefi"),
    ("text, page 3", "/changelog/?q=cache&page=3"),
    ("claims, all", "/changelog/claims/"),
    ("claims believed about nemotron", "/changelog/claims/?engine=nemotron&state=believed"),
]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=600)
    parser.add_argument("--corrections", type=int, default=150)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    setup_test_environment()
    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    try:
        run(args)
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


def run(args):

    from dashboard.roles import set_role

    text = generate(entries=args.entries, corrections=args.corrections)
    print(f"{connection.vendor}: generated log {len(text) / 1024:.0f} KB, {len(text.splitlines()):,} lines")
    t0 = time.perf_counter()
    plan = import_log(text)
    took = time.perf_counter() - t0
    print(f"import: {took:6.2f} s  (target ≤ 3 s)  {plan.summary()}")
    t0 = time.perf_counter()
    exported = export_markdown()
    took = time.perf_counter() - t0
    print(f"export: {took:6.2f} s  (target ≤ 1 s)  {len(exported) / 1024:.0f} KB")
    again = import_log(exported)
    print(f"re-import of the export: {again.summary()}")

    user = get_user_model().objects.create_user(username="bench", password="bench-password-123")
    set_role(user, "viewer")
    client = Client()
    client.force_login(user)
    print(f"\n{'request':<36} {'median ms':>9} {'max ms':>7} {'queries':>7} {'SQL ms':>6}  (target ≤ 200 ms)")
    for label, url in REQUESTS:
        times = []
        for _ in range(args.repeat):
            with CaptureQueriesContext(connection) as queries:
                t0 = time.perf_counter()
                response = client.get(url)
                times.append((time.perf_counter() - t0) * 1000)
            assert response.status_code == 200, (url, response.status_code)
        sql_ms = sum(float(q["time"]) for q in queries.captured_queries) * 1000
        found = response.content.decode().count('class="card log-entry"') or response.content.decode().count(
            'class="claim-row'
        )
        print(
            f"{label:<36} {statistics.median(times):9.1f} {max(times):7.1f} {len(queries):7} {sql_ms:6.1f}  "
            f"{found} shown"
        )


if __name__ == "__main__":
    main()
