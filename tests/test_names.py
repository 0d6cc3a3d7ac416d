"""Names are text (issue 46, item 5): a token, engine, channel, profile or host name with a
control character (Cc), a text-direction control (U+202E and its kin) or nothing visible is
refused with a message that names the character, wherever it is created (the page, the CLI,
the admin, the worker's own host name), and nothing is made."""

import html
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command

from dashboard.models import Engine, Host
from dashboard.names import NameValidator, name_problem
from dashboard.tokens.models import ApiToken
from sparkops.alerts.models import NotificationChannel
from sparkops.benchmarks.models import Profile
from sparkops.probes.models import ProbeProfile

ROOT = Path(__file__).resolve().parents[1]
RLO = "\u202e"  # RIGHT-TO-LEFT OVERRIDE: "gpt\u202etxt.exe" reads "gptexe.txt"

NOT_TEXT = [
    ("", "The name is empty"),
    ("   ", "The name is empty"),
    ("\u3000\t", "The name is empty"),  # ideographic space and a tab: nothing visible
    (f"ops{RLO}kooh", "U+202E (RIGHT-TO-LEFT OVERRIDE) at character 4"),
    ("a\u2066b", "U+2066 (LEFT-TO-RIGHT ISOLATE) at character 2"),
    ("mark\u200f", "U+200F (RIGHT-TO-LEFT MARK) at character 5"),
    ("two\nlines", "U+000A (LINE FEED) at character 4"),
    ("bell\x07", "U+0007 (a control character) at character 5"),
    ("esc\x1b[31m", "U+001B (ESCAPE) at character 4"),
]


@pytest.mark.parametrize(("name", "said"), NOT_TEXT)
def test_the_validator_says_which_character_and_where(name, said):
    for validator in (NameValidator(), NameValidator(slug=False)):
        with pytest.raises(ValidationError) as caught:
            validator(name)
        assert said in caught.value.messages[0], caught.value.messages


def test_text_names_may_be_any_visible_text_and_slugs_stay_slugs():
    for name in ("grafana (équipe 2)", "<script>alert(1)</script>", "Prometheus – prod", "日本語"):
        assert name_problem(name) == ""
        NameValidator(slug=False)(name)
    NameValidator()("vllm-main.2_b")
    with pytest.raises(ValidationError, match="Use letters, digits"):
        NameValidator()("has space")
    with pytest.raises(ValidationError, match="LINE FEED"):  # a regex's "$" let a final newline by
        NameValidator()("vllm-main\n")


# Tokens: the page, the CLI, the admin.


@pytest.mark.django_db
@pytest.mark.parametrize(("name", "said"), [("", "The name is empty"), (f"grafana{RLO}", "RIGHT-TO-LEFT OVERRIDE")])
def test_the_token_page_refuses_a_name_that_is_not_text(viewer_client, name, said):
    response = viewer_client.post("/account/tokens/", {"name": name})
    text = html.unescape(response.content.decode())
    assert response.status_code == 400 and said in text and "No token was created." in text
    assert not ApiToken.objects.exists()
    assert viewer_client.post("/account/tokens/", {"name": "grafana"}).status_code == 200
    assert list(ApiToken.objects.values_list("name", flat=True)) == ["grafana"]


@pytest.mark.django_db
def test_the_token_cli_refuses_a_name_that_is_not_text(viewer):
    with pytest.raises(CommandError, match=r"--name: The name contains U\+202E"):
        call_command("token", "create", viewer.username, "--name", f"prom{RLO}")
    with pytest.raises(CommandError, match="--name: The name is empty"):
        call_command("token", "create", viewer.username, "--name", " ")
    with pytest.raises(CommandError, match="--name"):  # a name is required
        call_command("token", "create", viewer.username)
    assert not ApiToken.objects.exists()


@pytest.mark.django_db
def test_the_admin_refuses_renaming_a_token_to_a_name_that_is_not_text(admin_client_, viewer):
    row, _ = ApiToken.issue(viewer, name="prometheus")
    response = admin_client_.post(f"/admin/tokens/apitoken/{row.pk}/change/", {"name": f"x{RLO}y"})
    assert response.status_code == 200 and "RIGHT-TO-LEFT OVERRIDE" in html.unescape(response.content.decode())
    row.refresh_from_db()
    assert row.name == "prometheus"


# Engines and hosts: the CLI, the admin, the worker's own name.


@pytest.mark.django_db
def test_engine_add_refuses_an_engine_or_host_name_that_is_not_text():
    add = ["engine", "add", "--kind", "vllm", "--url", "http://127.0.0.1:9"]
    with pytest.raises(CommandError, match=r"U\+202E \(RIGHT-TO-LEFT OVERRIDE\) at character 5"):
        call_command(*add[:2], f"vllm{RLO}", *add[2:])
    with pytest.raises(CommandError, match="LINE FEED"):
        call_command(*add[:2], "vllm\nmain", *add[2:])
    with pytest.raises(CommandError, match="RIGHT-TO-LEFT MARK"):
        call_command(*add[:2], "vllm-main", *add[2:], "--host", "spark\u200f")
    assert not Engine.objects.exists() and not Host.objects.exists()


@pytest.mark.django_db
def test_the_admin_refuses_a_host_name_that_is_not_text(admin_client_):
    response = admin_client_.post("/admin/dashboard/host/add/", {"name": f"spark{RLO}1"})
    assert response.status_code == 200 and "RIGHT-TO-LEFT OVERRIDE" in html.unescape(response.content.decode())
    assert not Host.objects.exists()


def test_the_workers_host_name_must_be_a_name():
    """SPARKOPS_HOST_NAME names the box the worker registers: refused at start-up, not stored."""
    env = {**os.environ, "SPARKOPS_HOST_NAME": f"spark{RLO}1", "DJANGO_SETTINGS_MODULE": "sparkops.settings"}
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode != 0
    assert "ImproperlyConfigured: SPARKOPS_HOST_NAME" in done.stderr and "RIGHT-TO-LEFT OVERRIDE" in done.stderr


# Channels: the CLI, the page.


@pytest.mark.django_db
def test_channel_add_refuses_a_name_that_is_not_text(admin_client_):
    with pytest.raises(CommandError, match="RIGHT-TO-LEFT OVERRIDE"):
        call_command("channel", "add", f"ops{RLO}", "--webhook", "http://127.0.0.1:9/hook")
    response = admin_client_.post(
        "/alerts/channels/new", {"name": "ops\u2067hook", "kind": "webhook", "url": "http://127.0.0.1:9/hook"}
    )
    assert response.status_code == 400 and "RIGHT-TO-LEFT ISOLATE" in html.unescape(response.content.decode())
    assert not NotificationChannel.objects.exists()


# Benchmark and probe profiles: the page.


@pytest.mark.django_db
@pytest.mark.parametrize(("url", "model"), [("/bench/profiles/new/", Profile), ("/probes/profiles/new/", ProbeProfile)])
def test_the_profile_page_refuses_a_name_that_is_not_text(operator_client, fleet, url, model):
    response = operator_client.post(url, {"name": f"short{RLO}", "engine": fleet["vllm"].pk})
    assert response.status_code == 200 and "RIGHT-TO-LEFT OVERRIDE" in html.unescape(response.content.decode())
    assert not model.objects.exists()
