"""The wheel works without a checkout: it holds every template and static file, an installed
copy run from another directory renders the login page with its stylesheet, and its state
directory lands outside the install. Also `sparkops --version`, the HTTP user agent, and the
log formats (SPARKOPS_LOG_FORMAT, journald). `.ci/wheel-check` does the same end to end with
`sparkops up` in a fresh virtualenv."""

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest

pytestmark = pytest.mark.xdist_group("test_packaging")  # its module-scoped fixture is built once a run, on one worker

ROOT = Path(__file__).resolve().parent.parent
SOURCES = (
    "pyproject.toml",
    "setup.py",
    "MANIFEST.in",
    "README.md",
    "sparkops",
    "dashboard",
    "simulator",
    "templates",
    "static",
)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    """The wheel, built from a copy of the tree (no build/ shared with anyone else), with a built manual."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    for name in SOURCES:
        path = ROOT / name
        if path.is_dir():
            shutil.copytree(path, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            src.mkdir(exist_ok=True)
            shutil.copy2(path, src / name)
    # A checkout after `make docs`: the built manual in site/ (setup.py ships it as sparkops/docs_site).
    (src / "site" / "alerts").mkdir(parents=True)
    (src / "site" / "index.html").write_text("<html><body>the manual</body></html>")
    (src / "site" / "alerts" / "index.html").write_text('<html><body><h2 id="exit0_no_restart">x</h2></body></html>')
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp / "dist"), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (built,) = (tmp / "dist").glob("sparkops-*.whl")
    return built


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory):
    """The wheel installed (not editable) into a directory of its own; the test venv's
    dependencies are used, this copy of sparkops and dashboard shadows the checkout's."""
    target = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(target), str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return target


def _clean_env(tmp_path, **extra):
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "SPARKOPS_VAR_DIR",
            "STATE_DIRECTORY",
            "XDG_STATE_HOME",
            "DATABASE_URL",
            "JOURNAL_STREAM",
            "SPARKOPS_LOG_FORMAT",
            "SPARKOPS_TEST_DB_NAME",
            "DJANGO_SETTINGS_MODULE",
        )
    }
    env.update(HOME=str(tmp_path / "home"), DJANGO_SETTINGS_MODULE="sparkops.settings", **extra)
    return env


def _python(code, *, cwd, env, pythonpath=None, check=True):
    if pythonpath:
        env = {**env, "PYTHONPATH": str(pythonpath)}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=check
    )


def test_wheel_holds_every_template_and_static_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    expected = set()
    for top in ("templates", "static"):
        expected |= {f"sparkops/{p.relative_to(ROOT).as_posix()}" for p in (ROOT / top).rglob("*") if p.is_file()}
    for p in [*(ROOT / "dashboard").rglob("*"), *(ROOT / "sparkops").rglob("*")]:
        rel = p.relative_to(ROOT)
        if p.is_file() and ({"templates", "static"} & set(rel.parts[:-1])) and "__pycache__" not in rel.parts:
            expected.add(rel.as_posix())
    assert "sparkops/templates/base.html" in expected and "sparkops/static/css/sparkops.css" in expected
    assert "sparkops/benchmarks/templates/bench/index.html" in expected  # the apps' own  # the apps' own
    assert expected - names == set()
    assert "simulator/bin/sim-systemctl" in names
    assert {"sparkops/probes/corpora/lighthouse.txt", "sparkops/probes/corpora/orchard.txt"} <= names  # haystacks
    assert not any(name.startswith(("var/", "tests/")) for name in names)


_LOGIN = """
import django, re
django.setup()
from django.conf import settings
from django.test import Client
import sparkops
print("PACKAGE", sparkops.__file__)
print("VAR_DIR", settings.VAR_DIR)
c = Client()
page = c.get("/login/")
assert page.status_code == 200, page.status_code
css = re.findall(r'<link[^>]+rel="stylesheet"[^>]+href="([^"]+)"', page.content.decode())
assert css, "no stylesheet on the login page"
for href in css:
    r = c.get(href)
    assert r.status_code == 200 and r["Content-Type"].startswith("text/css"), (href, r.status_code)
    body = b"".join(r.streaming_content) if r.streaming else r.content
    assert len(body) > 100, href
    print("CSS", href, len(body))
"""


def test_installed_wheel_run_elsewhere_serves_login_with_stylesheet(installed, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _clean_env(tmp_path, ALLOWED_HOSTS="testserver")
    out = _python(_LOGIN, cwd=elsewhere, env=env, pythonpath=installed, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"PACKAGE {installed}/sparkops/__init__.py" in out.stdout  # the installed copy, not the checkout
    assert f"VAR_DIR {tmp_path}/home/.local/state/sparkops" in out.stdout
    assert re.search(r"^CSS /static/css/sparkops\.css \d+$", out.stdout, re.M)
    assert not (installed / "var").exists()  # nothing written inside the install


_DOCS = """
import django
django.setup()
from django.test import Client
from dashboard.views.docs import docs_root
print("DOCS", docs_root())
for path, text in (("/docs/", b"the manual"), ("/docs/alerts/", b'id="exit0_no_restart"')):
    r = Client().get(path)
    assert r.status_code == 200, (path, r.status_code)
    assert text in b"".join(r.streaming_content), path
"""


def test_installed_wheel_serves_its_manual(wheel, installed, tmp_path):
    """The wheel carries the site `make docs` built, and the installed copy serves it at /docs/."""
    assert {"sparkops/docs_site/index.html", "sparkops/docs_site/alerts/index.html"} <= set(
        zipfile.ZipFile(wheel).namelist()
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _clean_env(tmp_path, ALLOWED_HOSTS="testserver")
    out = _python(_DOCS, cwd=elsewhere, env=env, pythonpath=installed, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert f"DOCS {installed}/sparkops/docs_site" in out.stdout


_VAR = "import django; django.setup(); from django.conf import settings; print(settings.VAR_DIR)"


@pytest.mark.parametrize(
    "extra, expect",
    [
        ({"SPARKOPS_VAR_DIR": "{tmp}/given"}, "{tmp}/given"),
        ({"SPARKOPS_VAR_DIR": "{tmp}/given", "STATE_DIRECTORY": "{tmp}/state"}, "{tmp}/given"),
        ({"STATE_DIRECTORY": "{tmp}/state:{tmp}/other"}, "{tmp}/state"),
        ({"XDG_STATE_HOME": "{tmp}/xdg"}, "{tmp}/xdg/sparkops"),
        ({}, "{tmp}/home/.local/state/sparkops"),
    ],
)
def test_installed_state_directory(installed, tmp_path, extra, expect):
    env = _clean_env(tmp_path, **{k: v.format(tmp=tmp_path) for k, v in extra.items()})
    (tmp_path / "cwd").mkdir()
    out = _python(_VAR, cwd=tmp_path / "cwd", env=env, pythonpath=installed)
    assert out.stdout.strip() == expect.format(tmp=tmp_path)


def test_installed_run_from_a_checkout_uses_its_var(installed, tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "sparkops").mkdir(parents=True)
    (checkout / "manage.py").write_text("")
    out = _python(_VAR, cwd=checkout, env=_clean_env(tmp_path), pythonpath=installed)
    assert out.stdout.strip() == str(checkout / "var")


def test_checkout_keeps_its_var_from_anywhere(tmp_path):
    out = _python(_VAR, cwd=tmp_path, env=_clean_env(tmp_path))
    assert out.stdout.strip() == str(ROOT / "var")


def test_version_and_user_agent():
    from dashboard.http import USER_AGENT

    out = subprocess.run(
        [sys.executable, "-m", "sparkops.cli", "--version"], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == f"sparkops {version('sparkops')}"
    assert f"sparkops/{version('sparkops')}" == USER_AGENT


_LOG = "import django, logging; django.setup(); logging.getLogger('sparkops.test').warning('disk %s full', 'sda')"


def test_log_formats(tmp_path):
    env = _clean_env(tmp_path, SPARKOPS_VAR_DIR=str(tmp_path / "var"))
    plain = _python(_LOG, cwd=tmp_path, env=env).stderr.strip().splitlines()[-1]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ WARNING sparkops\.test: disk sda full", plain)
    journald = _python(_LOG, cwd=tmp_path, env={**env, "JOURNAL_STREAM": "8:12345"}).stderr.strip().splitlines()[-1]
    assert journald == "WARNING sparkops.test: disk sda full"

    line = _python(_LOG, cwd=tmp_path, env={**env, "SPARKOPS_LOG_FORMAT": "json"}).stderr.strip().splitlines()[-1]
    entry = json.loads(line)
    assert entry["level"] == "WARNING" and entry["logger"] == "sparkops.test" and entry["message"] == "disk sda full"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}\+00:00", entry["time"])
    line = (
        _python(_LOG, cwd=tmp_path, env={**env, "SPARKOPS_LOG_FORMAT": "json", "JOURNAL_STREAM": "8:1"})
        .stderr.strip()
        .splitlines()[-1]
    )
    assert "time" not in json.loads(line)

    bad = _python(_LOG, cwd=tmp_path, env={**env, "SPARKOPS_LOG_FORMAT": "xml"}, check=False)
    assert bad.returncode != 0 and "SPARKOPS_LOG_FORMAT='xml' is not one of: plain, json" in bad.stderr
