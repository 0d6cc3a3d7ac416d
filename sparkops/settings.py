"""SparkOps settings: everything comes from the environment (see .env.example)."""

import os
import sys
from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured, ValidationError
from redis.exceptions import ConnectionError as _RedisConnectionError

from . import install as _install
from . import logformat as _logformat
from .env import env_bool, env_list, env_number, env_str, generated_secret_key

_day = 86400  # a day in seconds: the upper bounds of the interval settings below

BASE_DIR = Path(__file__).resolve().parent.parent
PACKAGE_DIR = Path(__file__).resolve().parent
# The project's templates/ and static/: at the top of a checkout, inside the sparkops package
# in an installed wheel (setup.py copies them there).
ASSETS_DIR = BASE_DIR if (BASE_DIR / "templates").is_dir() and (BASE_DIR / "manage.py").is_file() else PACKAGE_DIR


# Where the state lives (SQLite file, generated secret, demo state, up.lock, stack.json), never
# inside the install; sparkops/install.py says how it is chosen.
VAR_DIR = _install.var_dir(BASE_DIR)[0]
# What the running `sparkops up` of this var dir gave its children (its private Redis, a
# DATABASE_URL, a channel prefix): a command from another shell reaches the same install.
# The environment wins where it says something; nothing is taken from a stack that stopped.
_STACK = _install.stack_values(VAR_DIR)


def _given(name: str, default: str = "") -> str:
    return env_str(name, "") or _STACK.get(name, "") or default


DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY", "")
if not SECRET_KEY and DEBUG:
    SECRET_KEY = "insecure-debug-only-key-do-not-use-in-production-0123456789"
if not SECRET_KEY and env_bool("SPARKOPS_GENERATE_SECRET_KEY", True):
    # A fresh single-box install has no secret: make a random one once and keep it
    # (0600) under var/, so sessions survive restarts. Production sets SECRET_KEY.
    SECRET_KEY = generated_secret_key(VAR_DIR / "secret_key")

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
SITE_URL = env_str("SITE_URL", "http://127.0.0.1:8000").rstrip("/")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_celery_beat",
    "axes",
    "csp",
    "dashboard",
    "sparkops.alerts",
    "sparkops.changelog",
    "sparkops.benchmarks",
    "dashboard.tokens",
    "sparkops.probes",
    "sparkops.experiments",
    "sparkops.planner",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Content-Security-Policy on every response (policy below), the lockout page included.
    "sparkops.csp.CSPMiddleware",
    # Serves static/ from the app itself, so one process is a complete web server.
    "sparkops.staticstore.StaticMiddleware",  # WhiteNoise
    # 400 for a NUL character in the path, query or form (PostgreSQL refuses NUL in any query).
    "dashboard.middleware.RejectNulMiddleware",
    # While the database server is known down, a 503 that says so at once, not after the pool's wait.
    "dashboard.middleware.DatabaseDownMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # `Authorization: Bearer` API tokens on /api/… and /metrics: read-only, 401 when wrong.
    "dashboard.tokens.middleware.ApiTokenMiddleware",
    # Every page needs a login unless its view is marked @login_not_required.
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: turns a refused login (here or /admin/login/) into the lockout page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "sparkops.urls"
ASGI_APPLICATION = "sparkops.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [ASSETS_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "dashboard.roles.role_context",
            ],
        },
    },
]

_sqlite_default = f"sqlite:///{VAR_DIR / 'sparkops.sqlite3'}"
try:
    DATABASES = {"default": dj_database_url.parse(_given("DATABASE_URL", _sqlite_default), conn_max_age=60)}
except ValueError as exc:
    raise ImproperlyConfigured(f"DATABASE_URL is not a database URL: {exc}") from None
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL + a busy timeout so the worker, beat and web can write the same file.
    # IMMEDIATE: take the write lock at BEGIN, so concurrent writers wait for it (timeout)
    # instead of failing mid-transaction with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL;",
        "transaction_mode": "IMMEDIATE",
    }
    DATABASES["default"]["CONN_MAX_AGE"] = 0
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # One bounded connection pool per process (psycopg_pool through Django's "pool" option),
    # not persistent connections (CONN_MAX_AGE): under ASGI every request runs in a thread of
    # its own, and each thread kept its own connection for CONN_MAX_AGE, so 20 users opened
    # more than PostgreSQL's 100. CONN_MAX_AGE=0 alone would bound nothing either
    # (a connection per request in flight). With the pool a request borrows a connection for
    # its length and gives it back; past SPARKOPS_DB_POOL_MAX it waits up to
    # SPARKOPS_DB_POOL_TIMEOUT_S for one instead of opening another. The stack (web, worker,
    # beat) opens at most 3 × SPARKOPS_DB_POOL_MAX, plus one per CLI command being run.
    # On one box the pool alone bounds it: no further daemon to run and watch. A fleet adds
    # PgBouncer in transaction mode in front of PostgreSQL (docs/install.md#fleet): 50 boxes'
    # direct pools outgrew PostgreSQL's 100 (issue 48, bench/fleet_scale.py).
    _pool_max = env_number("SPARKOPS_DB_POOL_MAX", 10, minimum=1, maximum=1000)
    if sys.argv[1:2] == ["worker"]:
        # A worker's poller threads and tasks use one or two connections at a time; each of 50
        # boxes holding a pool sized for the web outgrew PostgreSQL's 100 (issue 48,
        # bench/fleet_scale.py). Two: a benchmark task may hold one for its run, the poller the other.
        _pool_max = env_number("SPARKOPS_WORKER_DB_POOL_MAX", 2, minimum=1, maximum=1000)
        SPARKOPS_DB_POOL_VARIABLE = "SPARKOPS_WORKER_DB_POOL_MAX"  # what a full pool's message names
    DATABASES["default"]["CONN_MAX_AGE"] = 0  # Django refuses persistent connections with a pool
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
        "min_size": min(2, _pool_max),
        "max_size": _pool_max,
        "timeout": env_number("SPARKOPS_DB_POOL_TIMEOUT_S", 10.0, cast=float, minimum=0.1, maximum=3600),
        # Idle connections above min_size close after a minute: a burst does not leave them open.
        "max_idle": 60.0,
    }
    # Behind PgBouncer in transaction mode (a fleet's deployment, docs/install.md#fleet) each
    # transaction may run on another server connection: a server-side cursor outside a
    # transaction (QuerySet.iterator()'s DECLARE … WITH HOLD) would be lost between them.
    # Prepared statements are not used either way (Django binds on the client by default).
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = env_bool("SPARKOPS_DB_PGBOUNCER", False)
    # Django passes ConnectionPool.check_connection to the pool for this: a connection handed
    # out is checked first (one round trip), so after a PostgreSQL restart no request gets a
    # dead one from the pool.
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = True

# Lets several test runs share one PostgreSQL server without clashing on "test_<name>".
if env_str("SPARKOPS_TEST_DB_NAME"):
    DATABASES["default"]["TEST"] = {"NAME": env_str("SPARKOPS_TEST_DB_NAME")}
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not Django's default in-memory database: the browser tests' web server is
    # another process and must open the same database.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test.sqlite3")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Empty means "no Redis configured": `sparkops up` starts a private one and sets it; a command
# from another shell takes the running stack's (stack.json).
REDIS_URL = _given("REDIS_URL")
_redis = REDIS_URL or "redis://127.0.0.1:6379/0"

CELERY_BROKER_URL = _redis
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# An idle worker's BRPOP returns empty every `polling_interval` s (1 by default) and is sent
# again: each round trip wakes the process, and on a small VM a wake costs ~1 ms of CPU.
# A message still arrives at once; only the empty answer comes less often.
CELERY_BROKER_TRANSPORT_OPTIONS = {"polling_interval": 10.0}
CELERY_TIMEZONE = "UTC"
CELERY_BEAT_SCHEDULER = "dashboard.beat:SparkOpsScheduler"

# Namespace of this install's keys in Redis (channel layer, live presence, poller leases).
SPARKOPS_CHANNEL_PREFIX = _given("SPARKOPS_CHANNEL_PREFIX", "sparkops")
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        # redis-py 8 reads with a 5 s socket timeout by default, which races channels_redis'
        # 5 s blocking pop and drops every idle WebSocket (django/channels_redis#422).
        # A pooled connection to a Redis that went away and came back fails its first command
        # ("Connection closed by server"): retry a command once, on a new connection, on a
        # connection error (else the first WebSocket connect after Redis returns is a 500 and
        # the worker's first live publishes fail). Never on a timeout: a command
        # that may have run is not sent twice. (redis-py's synchronous clients, presence and
        # the poller lease, already retry connection errors by default.)
        "CONFIG": {
            "hosts": [{"address": _redis, "socket_timeout": None, "retry_on_error": [_RedisConnectionError]}],
            "prefix": SPARKOPS_CHANNEL_PREFIX,
        },
    }
}

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Login throttling (django-axes): after SPARKOPS_LOGIN_FAILURE_LIMIT failed logins for one user
# name from one address, that pair is refused (even with the right password) for
# SPARKOPS_LOGIN_COOLOFF_S seconds after its latest attempt, with HTTP 429 and a page that says
# so. Other users from that address, and that user from elsewhere, are not affected. Both the
# login page and /admin/login/ go through authenticate(), so both are throttled. Unlock:
# `sparkops user unlock NAME`, or Django admin → Axes → Access attempts (delete the row).
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",  # refuses a locked-out pair before any password check
    # ModelBackend, with the password hash run after the user's connection went back to the
    # pool: a burst of logins does not hold every pooled connection through its hashes.
    "dashboard.authbackend.PoolFriendlyModelBackend",
]
AXES_FAILURE_LIMIT = env_number("SPARKOPS_LOGIN_FAILURE_LIMIT", 5, minimum=1, maximum=1000)
AXES_COOLOFF_TIME = timedelta(seconds=env_number("SPARKOPS_LOGIN_COOLOFF_S", 900, minimum=1, maximum=_day * 365))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True  # a good login forgets that pair's earlier failures
AXES_LOCKOUT_CALLABLE = "dashboard.views.lockout.lockout_response"
AXES_USERNAME_CALLABLE = "dashboard.views.lockout.login_username"  # cut to the 255 its rows hold
AXES_HTTP_RESPONSE_CODE = 429
# The client is REMOTE_ADDR (django-ipware is not installed): behind a reverse proxy every
# client shares the proxy's address, so the pair is in effect the user name alone.
AXES_ENABLE_ACCESS_FAILURE_LOG = True  # each failure is a row in the admin, besides the log line
# The log line ("AXES: New login failure by {username: …, ip_address: …}") names the user
# name and address; the password and CSRF token are masked in the stored POST data.
AXES_SENSITIVE_PARAMETERS = ["csrfmiddlewaretoken"]
AXES_VERBOSE = False  # no start-up banner on every command; the failure lines stay

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "overview"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [ASSETS_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
]
# collectstatic (run by `sparkops up`, the migrate unit, the Docker build) writes hashed, Brotli-
# and gzip-compressed copies here; WhiteNoise serves those for ever (immutable). Until it has run,
# or after a static file changed, pages name the plain files, served from the finders.
STATIC_ROOT = Path(env_str("STATIC_ROOT") or VAR_DIR / "static")
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "sparkops.staticstore.StaticStorage"},
}
WHITENOISE_USE_FINDERS = True
WHITENOISE_AUTOREFRESH = DEBUG
WHITENOISE_KEEP_ONLY_HASHED_FILES = True  # the plain names come from the finders

# Alert delivery (sparkops/alerts/conf.py reads these): parsed here with the rest, so a bad value
# stops start-up naming the variable instead of failing inside a delivery.
SPARKOPS_ALERT_RETRY_BASE_S = env_number("SPARKOPS_ALERT_RETRY_BASE_S", 2.0, cast=float, minimum=0.1, maximum=3600)
SPARKOPS_ALERT_RETRY_CAP_S = env_number("SPARKOPS_ALERT_RETRY_CAP_S", 600.0, cast=float, minimum=1, maximum=_day)
SPARKOPS_ALERT_RETRY_FOR_S = env_number(
    "SPARKOPS_ALERT_RETRY_FOR_S", 26 * 3600.0, cast=float, minimum=1, maximum=_day * 30
)
SPARKOPS_ALERT_CLAIM_LEASE_S = env_number("SPARKOPS_ALERT_CLAIM_LEASE_S", 30.0, cast=float, minimum=1, maximum=_day)
SPARKOPS_ALERT_RENOTIFY_S = env_number("SPARKOPS_ALERT_RENOTIFY_S", 3600.0, cast=float, minimum=10, maximum=_day * 7)
SPARKOPS_ALERT_SWEEP_S = env_number("SPARKOPS_ALERT_SWEEP_S", 5.0, cast=float, minimum=0.2, maximum=3600)
SPARKOPS_ALERT_HTTP_TIMEOUT_S = env_number("SPARKOPS_ALERT_HTTP_TIMEOUT_S", 5.0, cast=float, minimum=0.1, maximum=600)

# Mail (alerts); Django's SMTP backend.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "127.0.0.1")
EMAIL_PORT = env_number("EMAIL_PORT", 25, minimum=1, maximum=65535)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
EMAIL_TIMEOUT = env_number("EMAIL_TIMEOUT", 10, minimum=1, maximum=3600)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "sparkops@localhost")

# Polling
SPARKOPS_POLL_INTERVAL = env_number("SPARKOPS_POLL_INTERVAL", 2.0, cast=float, minimum=0.5, maximum=3600)
# What one engine's /metrics may hold, as Prometheus bounds a scrape (sparkops/collectors/prom.py).
SPARKOPS_SCRAPE_SAMPLE_LIMIT = env_number(
    "SPARKOPS_SCRAPE_SAMPLE_LIMIT", 20000, cast=int, minimum=1, maximum=10_000_000
)
SPARKOPS_SCRAPE_LABEL_LIMIT = env_number("SPARKOPS_SCRAPE_LABEL_LIMIT", 64, cast=int, minimum=1, maximum=10_000)
SPARKOPS_SCRAPE_LABEL_NAME_LENGTH_LIMIT = env_number(
    "SPARKOPS_SCRAPE_LABEL_NAME_LENGTH_LIMIT", 128, cast=int, minimum=1, maximum=65_536
)
SPARKOPS_SCRAPE_LABEL_VALUE_LENGTH_LIMIT = env_number(
    "SPARKOPS_SCRAPE_LABEL_VALUE_LENGTH_LIMIT", 2048, cast=int, minimum=1, maximum=1_048_576
)
SPARKOPS_SCRAPE_PARSE_TIME_LIMIT_S = env_number(
    "SPARKOPS_SCRAPE_PARSE_TIME_LIMIT_S", 1.0, cast=float, minimum=0.01, maximum=60
)
# A worker whose clock is off the database's by more than this says so (its host's clock_skew
# alert, /healthz); times other processes compare come from the database's clock anyway.
SPARKOPS_CLOCK_SKEW_MAX_S = env_number("SPARKOPS_CLOCK_SKEW_MAX_S", 5.0, cast=float, minimum=0.1, maximum=3600)
SPARKOPS_LIVENESS_INTERVAL = env_number("SPARKOPS_LIVENESS_INTERVAL", 1.0, cast=float, minimum=0.2, maximum=3600)
# The box's worker watches its engines' processes through pidfds and follows their units' journal
# (sparkops/poller/exitwatch.py): a death is seen when it happens, not at the next probe.
SPARKOPS_EXIT_WATCH = env_bool("SPARKOPS_EXIT_WATCH", True)
# Its sources, each on its own switch under that one: a pidfd per watched process, and the units'
# own stop (an ExecStopPost= hook, `sparkops stopped`, sending one datagram to SPARKOPS_STOP_SOCKET).
SPARKOPS_EXIT_WATCH_PIDFDS = env_bool("SPARKOPS_EXIT_WATCH_PIDFDS", True)
SPARKOPS_EXIT_WATCH_STOP_HOOK = env_bool("SPARKOPS_EXIT_WATCH_STOP_HOOK", True)
# The request contract on live traffic (sparkops/collectors/contract.py): finish-reason shares,
# prompts at the window's edge and journal 400/500/peg-native counts over this trailing window;
# requests cut at one round duration over the second.
SPARKOPS_CONTRACT_WINDOW_S = env_number("SPARKOPS_CONTRACT_WINDOW_S", 600.0, cast=float, minimum=1.0, maximum=_day * 7)
SPARKOPS_CONTRACT_CUT_WINDOW_S = env_number(
    "SPARKOPS_CONTRACT_CUT_WINDOW_S", 3600.0, cast=float, minimum=1.0, maximum=_day * 7
)
# A resident poller keeps its readings in memory and stores them every this many seconds
# (0: every tick), as Telegraf's flush_interval does; the live view and the alerts see every
# tick at once. A crash loses at most this much history; a status change is stored at once.
SPARKOPS_FLUSH_INTERVAL = env_number("SPARKOPS_FLUSH_INTERVAL", 10.0, cast=float, minimum=0.0, maximum=3600)
# What a poller holds when a store fails (the database refused, or is gone) stays held for the
# next store, at most this many samples (~200 bytes each in memory); past it the oldest are
# dropped first, and the log says how many.
SPARKOPS_FLUSH_HOLD_MAX = env_number("SPARKOPS_FLUSH_HOLD_MAX", 200_000, minimum=1000, maximum=10_000_000)
# Where a worker spools the pages it sends while the database is away (a file each, fsync'd before
# the send): "" is the var dir's spool/<host>. On a disk of its own it survives the database's full one.
SPARKOPS_SPOOL_DIR = env_str("SPARKOPS_SPOOL_DIR", "")
# Live view: an open socket keeps its presence key this long (refreshed every third of it);
# the poller asks whether anyone watches at most this often before rendering cards.
SPARKOPS_LIVE_PRESENCE_TTL = env_number("SPARKOPS_LIVE_PRESENCE_TTL", 60.0, cast=float, minimum=3, maximum=_day)
SPARKOPS_LIVE_PRESENCE_CACHE = env_number("SPARKOPS_LIVE_PRESENCE_CACHE", 2.0, cast=float, minimum=0, maximum=3600)
try:  # checked here so a bad value stops start-up, not the first server it starts
    from .ports import port_range as _port_range

    _port_range()
except ValueError as _exc:
    raise ImproperlyConfigured(str(_exc)) from None
SPARKOPS_HOST_NAME = env_str("SPARKOPS_HOST_NAME", "") or __import__("socket").gethostname()
try:  # the worker registers its box by this name: a name like any other (dashboard/names.py)
    from dashboard.names import name_clean as _name_clean

    _name_clean(SPARKOPS_HOST_NAME)
except ValidationError as _exc:
    raise ImproperlyConfigured(f"SPARKOPS_HOST_NAME {SPARKOPS_HOST_NAME!r}: {' '.join(_exc.messages)}") from None
# Commands and paths the host collectors read; overridable for --user units, odd
# installs, or the simulator (which ships systemctl/journalctl/nvidia-smi work-alikes).
SPARKOPS_SYSTEMCTL = env_str("SPARKOPS_SYSTEMCTL", "systemctl")
# On a box's worker: allow admins to restart this box's engine units from a down card (runs
# `systemctl reset-failed` and `systemctl restart UNIT` as the worker's user). Off by default.
SPARKOPS_UNIT_ACTIONS = env_bool("SPARKOPS_UNIT_ACTIONS", False)
SPARKOPS_JOURNALCTL = env_str("SPARKOPS_JOURNALCTL", "journalctl")
SPARKOPS_NVIDIA_SMI = env_str("SPARKOPS_NVIDIA_SMI", "nvidia-smi")
SPARKOPS_PROC_ROOT = env_str("SPARKOPS_PROC_ROOT", "/proc")
SPARKOPS_CGROUP_ROOT = env_str("SPARKOPS_CGROUP_ROOT", "/sys/fs/cgroup")
# Where files a unit names (EnvironmentFile=) are read: "/" on the box; the simulator's root in demo.
SPARKOPS_HOST_ROOT = env_str("SPARKOPS_HOST_ROOT", "/")
# The box's runtime directory: `sparkops launch` keeps its one-cold-start-at-a-time lock here, so
# every launch on the box must see the same one (root's default /run/sparkops; a user's
# $XDG_RUNTIME_DIR/sparkops).
SPARKOPS_RUNTIME_DIR = env_str("SPARKOPS_RUNTIME_DIR", "") or (
    "/run/sparkops"
    if os.geteuid() == 0
    else os.path.join(os.environ.get("XDG_RUNTIME_DIR") or f"/tmp/sparkops-{os.geteuid()}", "sparkops")
)
# The box's worker listens here for its engine units' stop hooks (`sparkops stopped`, written into
# each unit's ExecStopPost= by `sparkops unit fix`); a socket only the worker's user may write to.
SPARKOPS_STOP_SOCKET = env_str("SPARKOPS_STOP_SOCKET", "") or os.path.join(SPARKOPS_RUNTIME_DIR, "stopped.sock")
SPARKOPS_GPU_BACKEND = env_str("SPARKOPS_GPU_BACKEND", "auto")  # auto | nvml | nvidia-smi | none

# The watcher's heartbeat (dashboard/heartbeat.py): the leading worker GETs (or POSTs) this
# Healthchecks-style URL every interval while /healthz would say 200, and the failure URL
# (default: URL + "/fail") when it would say 503. Unset: no heartbeat.
SPARKOPS_HEARTBEAT_URL = env_str("SPARKOPS_HEARTBEAT_URL", "").strip()
SPARKOPS_HEARTBEAT_FAIL_URL = env_str("SPARKOPS_HEARTBEAT_FAIL_URL", "").strip()
SPARKOPS_HEARTBEAT_METHOD = env_str("SPARKOPS_HEARTBEAT_METHOD", "GET").strip().upper()
SPARKOPS_HEARTBEAT_INTERVAL_S = env_number("SPARKOPS_HEARTBEAT_INTERVAL_S", 60.0, cast=float, minimum=1, maximum=_day)
for _name in ("SPARKOPS_HEARTBEAT_URL", "SPARKOPS_HEARTBEAT_FAIL_URL"):
    if globals()[_name] and not globals()[_name].startswith(("http://", "https://")):
        raise ImproperlyConfigured(f"{_name}={globals()[_name]!r} is not an http:// or https:// URL")
if SPARKOPS_HEARTBEAT_METHOD not in ("GET", "POST"):
    raise ImproperlyConfigured(f"SPARKOPS_HEARTBEAT_METHOD={SPARKOPS_HEARTBEAT_METHOD!r} is not GET or POST")

# Security headers that `check --deploy` expects when DEBUG is off.
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", False)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", False)
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
SECURE_HSTS_SECONDS = env_number("SECURE_HSTS_SECONDS", 0, minimum=0, maximum=_day * 365 * 10)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# Content-Security-Policy (django-csp; sparkops/csp.py adds the page's own ws:// and wss://
# origin to connect-src for the live WebSocket). No inline script and no style="" attribute
# anywhere: every script and stylesheet is a static file. plotly.js needs no 'unsafe-inline'
# either, only two hashes in style-src: PLOTLY_EMPTY_STYLE is the empty <style> element it adds
# (a global one and one per chart) and then fills through the CSSOM (insertRule, which CSP does
# not restrict); PLOTLY_MAPLIBRE_STYLE is the fixed stylesheet its bundle injects at load for map
# traces (tests/test_csp.py checks both against the vendored bundle, so an upgrade says so).
PLOTLY_EMPTY_STYLE = "'sha256-47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU='"
PLOTLY_MAPLIBRE_STYLE = "'sha256-ji27qzEtxXZW+7dun6UwjHXJ18e6WAin1VvNtkzIE/o='"  # plotly.js 4.1.1 (static/vendor/)
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", PLOTLY_EMPTY_STYLE, PLOTLY_MAPLIBRE_STYLE],
        "connect-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "frame-ancestors": ["'none'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
    },
}
if env_bool("SECURE_PROXY_SSL_HEADER", False):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# SPARKOPS_LOG_FORMAT: plain (default) or json (one object a line); under journald
# (JOURNAL_STREAM set) no timestamp of our own, the journal has one (sparkops/logformat.py).
SPARKOPS_LOG_FORMAT = env_str("SPARKOPS_LOG_FORMAT", "plain").strip().lower() or "plain"
if SPARKOPS_LOG_FORMAT not in _logformat.FORMATS:
    raise ImproperlyConfigured(
        f"SPARKOPS_LOG_FORMAT={SPARKOPS_LOG_FORMAT!r} is not one of: " + ", ".join(_logformat.FORMATS)
    )
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": _logformat.formatters(SPARKOPS_LOG_FORMAT, _logformat.under_journald()),
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "default"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # httpx logs every request at INFO: with webhooks and the CLI that is noise, not news.
    "loggers": {"django.db.backends": {"level": "WARNING"}, "httpx": {"level": "WARNING"}},
}
