"""A PostgreSQL server of the test's own, to stop, fill or switch to read-only (issue 46): the
machine's shared server cannot be stopped under the other test workers.

`PrivatePostgres(tmp)` runs initdb and pg_ctl (PostgreSQL's own tools, found by pg_config or on
PATH) on a free 127.0.0.1 port with its data directory under TMP, which may be a tmpfs the
test fills. initdb and the server refuse to run as root: as root they run as the `postgres`
user, which owns the data directory (so TMP must be reachable by it: not under pytest's 0700
tmp_path; `reachable_dir()` makes one). `load_schema_from(settings_dict)` copies the test
database's tables (pg_dump --schema-only), so a web server pointed at `url` has SparkOps' schema
without running the migrations again."""

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from sparkops.ports import free_port


def _bin(name: str) -> str:
    try:
        bindir = subprocess.run(["pg_config", "--bindir"], capture_output=True, text=True, check=True).stdout.strip()
        if (Path(bindir) / name).is_file():
            return str(Path(bindir) / name)
    except (OSError, subprocess.CalledProcessError):
        pass
    found = shutil.which(name) or next(iter(sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))), None)
    if not found:
        raise FileNotFoundError(f"{name} (PostgreSQL's server tools) is not installed")
    return str(found)


def reachable_dir(prefix: str = "sparkops-pg-") -> Path:
    """A new directory under the system's temp dir that the `postgres` user can enter."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


class PrivatePostgres:
    """One PostgreSQL server: `start()`, `stop()` (fast: what an outage is), `url`, `sql()`."""

    def __init__(self, root: Path, *, dbname: str = "sparkops") -> None:
        self.root = Path(root)
        self.data = self.root / "pgdata"
        self.port = free_port()
        self.dbname = dbname
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"
        self._as = pwd.getpwnam("postgres") if os.geteuid() == 0 else None

    def _run(self, *argv: str, **kw) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", "postgres", "--"] if self._as else []
        return subprocess.run([*prefix, *argv], capture_output=True, text=True, check=True, **kw)

    def init(self) -> "PrivatePostgres":
        self.root.mkdir(parents=True, exist_ok=True)
        self.data.mkdir(mode=0o700, exist_ok=True)
        if self._as:
            os.chown(self.root, self._as.pw_uid, self._as.pw_gid)
            os.chown(self.data, self._as.pw_uid, self._as.pw_gid)
        # 1 MB WAL segments and no fsync: a data directory of ~40 MB that a small tmpfs holds.
        self._run(_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "--wal-segsize=1", "-N")
        return self

    def start(self) -> None:
        opts = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.root} -c fsync=off -c max_wal_size=32MB"
        opts += " -c min_wal_size=2MB -c full_page_writes=off"
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.root / "server.log"), "-o", opts, "-w", "start")

    def stop(self) -> None:
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def running(self) -> bool:
        argv = [_bin("pg_ctl"), "-D", str(self.data), "status"]
        return subprocess.run(argv, capture_output=True, check=False).returncode == 0

    def sql(self, statement: str, *, dbname: str | None = None) -> str:
        """STATEMENT's output (psql, unaligned), run as the superuser."""
        argv = [_bin("psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", dbname or self.dbname]
        return subprocess.run(
            [*argv, "-XAtq", "-v", "ON_ERROR_STOP=1", "-c", statement], check=True, **_CAPTURE
        ).stdout.strip()

    def create_database(self) -> None:
        self.sql(f'CREATE DATABASE "{self.dbname}"', dbname="postgres")

    def load_schema_from(self, settings_dict: dict) -> None:
        """The tables of the database SETTINGS_DICT names (Django's connection settings), empty."""
        d = settings_dict
        dump = [_bin("pg_dump"), "--schema-only", "--no-owner", "--no-privileges", "-d", d["NAME"]]
        dump += [
            "-h",
            d.get("HOST") or "127.0.0.1",
            "-p",
            str(d.get("PORT") or 5432),
            "-U",
            d.get("USER") or "postgres",
        ]
        schema = subprocess.run(dump, check=True, **_CAPTURE).stdout
        load = [_bin("psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "-d", self.dbname]
        subprocess.run([*load, "-Xq", "-v", "ON_ERROR_STOP=1"], input=schema, check=True, **_CAPTURE)

    def log_tail(self, chars: int = 3000) -> str:
        path = self.root / "server.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def close(self) -> None:
        if self.data.exists() and self.running():
            self.stop()


_CAPTURE = {"capture_output": True, "text": True}
