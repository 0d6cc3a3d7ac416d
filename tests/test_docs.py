"""The documentation cannot drift from the code: every alert rule, every cause, every audit check
and every CLI command has its section (an anchor) in docs/, the CLI reference is what the commands'
own parsers say, and every variable sparkops/settings.py reads is in docs/configuration.md. The
site itself is built with `mkdocs build --strict` in CI (.ci/run), which checks every link."""

import ast
import base64
import hashlib
import importlib.util
import re
from pathlib import Path

import pytest
from django.template.loader import render_to_string
from markdown.extensions.toc import slugify

from sparkops.alerts.rules import REGISTRY
from sparkops.alerts.services import external_alert_fire
from sparkops.audit.base import Result
from sparkops.audit.checks import CHECKS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
FENCE = re.compile(r"^(```+|~~~+)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*(?:\{#([^}\s]+)\})?\s*$")
# sparkops/env.py's strict parsers, and settings' reader of a value `sparkops up` recorded for its stack.
ENV_READERS = {"env_str", "env_bool", "env_number", "env_list", "_given"}


def anchors(page: str, docs: Path = DOCS) -> set[str]:
    """The anchors MkDocs gives PAGE's headings: the explicit `{#id}`, else the toc extension's slug
    (code fences skipped: a `# comment` in a shell block is no heading)."""
    found, fence = set(), None
    for line in (docs / page).read_text().splitlines():
        mark = FENCE.match(line)
        if mark:
            fence = mark.group(1) if fence is None else (None if line.startswith(fence) else fence)
            continue
        heading = HEADING.match(line) if fence is None else None
        if heading:
            found.add(heading.group(2) or slugify(heading.group(1), "-"))
    return found


def cli_reference():
    spec = importlib.util.spec_from_file_location("cli_reference", ROOT / "tools" / "cli_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cause_keys() -> set[str]:
    """Every `Cause("key", …)` the classifier can return, read from its source."""
    source = (ROOT / "sparkops" / "alerts" / "rules" / "causes.py").read_text()
    return set(re.findall(r'Cause\(\s*"([a-z0-9_]+)"', source))


def test_anchors_are_read_as_mkdocs_makes_them(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# Title\n\n## Engine down {#engine_down}\n\n```sh\n# not a heading\n```\n\n### 5.3 Two words\n")
    assert anchors("page.md", tmp_path) == {"title", "engine_down", "53-two-words"}


def test_every_alert_rule_has_its_section():
    missing = sorted(set(REGISTRY) - anchors("alerts.md"))
    assert not missing, f"docs/alerts.md has no section {{#key}} for the rules {missing}"


def section(page: str, anchor: str) -> str:
    """The text under PAGE's heading {#ANCHOR}, up to the next heading."""
    text = (DOCS / page).read_text()
    start = text.index(f"{{#{anchor}}}")
    following = re.search(r"^#{1,6} ", text[start:].split("\n", 1)[1], re.M)
    body = text[start:].split("\n", 1)[1]
    return body[: following.start()] if following else body


@pytest.mark.parametrize("key", sorted(REGISTRY))
def test_each_rule_s_section_states_its_severity(key):
    """What pages and what only notifies is the severity: the docs say the one the code has."""
    said = re.match(r"\s*\*\*(Critical|Warning|Info)\*\*", section("alerts.md", key))
    assert said, f"docs/alerts.md#{key} does not start with its severity (**Critical**, **Warning**, **Info**)"
    assert said.group(1).lower() == REGISTRY[key].severity, f"docs/alerts.md#{key} says {said.group(1)}"


def test_every_cause_has_its_section():
    keys = cause_keys()
    assert {"exit0_no_restart", "fatal_no_restart", "process_gone"} <= keys  # the reader finds them
    missing = sorted(keys - anchors("alerts.md"))
    assert not missing, f"docs/alerts.md has no section {{#key}} for the causes {missing}"


def test_every_audit_check_has_its_section():
    missing = sorted(set(CHECKS) - anchors("audit.md"))
    assert not missing, f"docs/audit.md has no section {{#key}} for the checks {missing}"


def test_every_cli_command_has_its_section():
    names = cli_reference().command_names()
    assert {"up", "bench-run", "ledger-kv-add", "wait-ready", "stopped"} <= set(names)
    missing = sorted(set(names) - anchors("cli.md"))
    assert not missing, f"docs/cli.md has no section for {missing}: run `make docs`"


def test_cli_reference_is_what_the_parsers_say():
    generated = cli_reference().page()
    assert (DOCS / "cli.md").read_text() == generated, (
        "docs/cli.md differs from the commands' parsers: run `make docs` (tools/cli_reference.py --write)"
    )


def settings_variables() -> set[str]:
    """Every variable sparkops/settings.py reads through sparkops/env.py's parsers."""
    tree = ast.parse((ROOT / "sparkops" / "settings.py").read_text())
    return {
        node.args[0].value
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and getattr(node.func, "id", None) in ENV_READERS
        and node.args
        and isinstance(node.args[0], ast.Constant)
    }


def documented_variables() -> set[str]:
    """The names in the first column of docs/configuration.md's tables."""
    names = set()
    for line in (DOCS / "configuration.md").read_text().splitlines():
        if line.startswith("| `"):
            names |= set(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split(" | ")[0]))
    return names


def test_every_setting_is_documented():
    read = settings_variables()
    assert {"DATABASE_URL", "SPARKOPS_POLL_INTERVAL", "SPARKOPS_ALERT_RETRY_BASE_S"} <= read
    missing = sorted(read - documented_variables())
    assert not missing, f"docs/configuration.md does not describe {missing}"


@pytest.mark.parametrize("name", sorted(documented_variables()))
def test_every_documented_variable_is_read(name):
    """A variable the page describes is read somewhere (a `*_FILE` twin through env_str)."""
    base = name.removesuffix("_FILE")
    sources = [*ROOT.joinpath("sparkops").rglob("*.py"), *ROOT.joinpath("dashboard").rglob("*.py")]
    sources += [*ROOT.joinpath("tests").rglob("*.py"), ROOT / "Makefile"]
    assert any(f'"{base}"' in path.read_text() for path in sources), f"{name} is documented but nothing reads it"


def test_readme_is_a_way_in():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 400
    assert re.search(r"^make test\b", readme, re.M), "the README's test command is `make test`"
    for target in re.findall(r"\]\((docs/[^)#]+)", readme):
        assert (ROOT / target).is_file(), f"README links to {target}, which does not exist"


# --- the built site, served at /docs/ ------------------------------------------------------------

PAGE = '<html><head><script>var palette = 1;</script><script src="x.js"></script></head><body>{}</body></html>'


@pytest.fixture
def built_site(settings, tmp_path):
    """A checkout whose site/ holds a home page and one section, as MkDocs writes them."""
    site = tmp_path / "site"
    (site / "alerts").mkdir(parents=True)
    (site / "index.html").write_text(PAGE.format("the manual"))
    (site / "alerts" / "index.html").write_text(PAGE.format('<h2 id="exit0_no_restart">exit0_no_restart</h2>'))
    (site / "search.json").write_text("{}")
    settings.BASE_DIR = tmp_path
    return site


@pytest.mark.django_db
def test_the_built_site_is_served_at_docs(client, built_site):
    home = client.get("/docs/")
    assert home.status_code == 200
    assert b"the manual" in b"".join(home.streaming_content)
    section = client.get("/docs/alerts/")
    assert b'id="exit0_no_restart"' in b"".join(section.streaming_content)
    assert client.get("/docs/alerts").headers["Location"] == "/docs/alerts/"
    assert client.get("/docs/search.json").headers["Content-Type"] == "application/json"


@pytest.mark.django_db
def test_the_site_s_inline_scripts_are_allowed_by_hash_and_no_others(client, built_site):
    policy = client.get("/docs/").headers["Content-Security-Policy"]
    script_src = next(part for part in policy.split(";") if part.strip().startswith("script-src"))
    digest = base64.b64encode(hashlib.sha256(b"var palette = 1;").digest()).decode()
    assert f"'sha256-{digest}'" in script_src
    assert "unsafe-inline" not in script_src
    # A revalidated page (304) carries the same policy: a browser replaces the cached page's headers with it.
    modified = client.get("/docs/").headers["Last-Modified"]
    again = client.get("/docs/", headers={"If-Modified-Since": modified})
    assert again.status_code == 304 and f"'sha256-{digest}'" in again.headers["Content-Security-Policy"]
    # A page of the product keeps the plain policy.
    assert (
        "sha256-" not in client.get("/login/").headers["Content-Security-Policy"].split("script-src")[1].split(";")[0]
    )


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/docs/no-such/", "/docs/" + "x" * 300, "/docs/ünï©ødé"])
def test_a_page_the_manual_does_not_have_is_404(client, built_site, path):
    assert client.get(path).status_code == 404


@pytest.mark.django_db
def test_without_a_built_site_the_page_says_how_to_build_it(client, settings, tmp_path):
    settings.BASE_DIR = tmp_path  # a checkout that never ran `make docs`
    response = client.get("/docs/alerts/")
    assert response.status_code == 404
    assert b"make docs" in response.content


# --- the dashboard links each cause and check to its section -----------------------------------------


@pytest.mark.django_db
def test_an_alert_s_cause_links_to_its_section(viewer_client, fleet):
    event = external_alert_fire(
        rule="engine_down",
        severity="critical",
        engine=fleet["llama"],
        subject="llama-side",
        message="llama-side exited with status 0 under Restart=on-failure",
        cause="exit0_no_restart",
    )
    link = 'href="/docs/alerts/#exit0_no_restart"'
    assert link in viewer_client.get(f"/alerts/{event.pk}/").content.decode()  # the alert's page
    assert link in viewer_client.get("/alerts/").content.decode()  # its row
    card = viewer_client.get("/").content.decode()
    card = card[card.index(f'id="engine-card-{fleet["llama"].pk}"') :]
    assert link in card[: card.index("</p>", card.index('data-field="alert"'))]  # the engine's card
    assert "exit0_no_restart" in anchors("alerts.md")


@pytest.mark.django_db
@pytest.mark.parametrize(
    "rule, cause, anchor",
    [("kv_saturated", "kv_full", "kv_saturated"), ("restart_loop", "restart_loop", "restart_loop")],
)
def test_another_rule_s_alert_links_to_its_rule_s_section(viewer_client, fleet, rule, cause, anchor):
    """Only engine_down's causes have sections of their own; another rule's cause is a detail of it."""
    event = external_alert_fire(
        rule=rule, severity="warning", engine=fleet["vllm"], subject="vllm-main", message="m", cause=cause
    )
    assert f'href="/docs/alerts/#{anchor}"' in viewer_client.get(f"/alerts/{event.pk}/").content.decode()
    assert anchor in anchors("alerts.md")


@pytest.mark.django_db
@pytest.mark.parametrize("check", sorted(CHECKS))
def test_an_audit_finding_links_to_its_check_s_section(fleet, check):
    result = Result(check, CHECKS[check].title, "vllm-main", "fail", "the evidence")
    page = render_to_string("dashboard/audit.html", {"host": fleet["host"], "engine": None, "results": [result]})
    assert f'href="/docs/audit/#{check}"' in page
    assert check in anchors("audit.md")


@pytest.mark.django_db
def test_the_controls_link_to_their_sections(fleet):
    """A down card's fix links to the playbook; the restart budget to how it is learned (issue 49)."""
    fix = render_to_string(
        "dashboard/partials/_unit_fix.html", {"engine": fleet["vllm"], "commands": [], "restartable": False}
    )
    assert 'href="/docs/controls/#playbook"' in fix and "playbook" in anchors("controls.md")
    budget = render_to_string("dashboard/partials/_restart_budget.html", {"budget": {}})
    assert 'href="/docs/launch/#restart-budget"' in budget and "restart-budget" in anchors("launch.md")
