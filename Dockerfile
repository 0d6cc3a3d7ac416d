FROM python:3.11-slim
# systemctl and journalctl for the worker's systemd and journal collectors (they talk to the
# host's systemd over the mounted bus socket and read the mounted journal; see docker-compose.yml).
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends systemd \
    && rm -rf /var/lib/apt/lists/*
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1 STATIC_ROOT=/app/staticfiles SPARKOPS_VAR_DIR=/var/lib/sparkops
WORKDIR /app
COPY pyproject.toml setup.py MANIFEST.in README.md ./
COPY sparkops sparkops
COPY dashboard dashboard
COPY simulator simulator
COPY templates templates
COPY static static
# A real install (the wheel's way: templates and static inside the package), not -e.
RUN pip install --no-cache-dir . && rm -rf build \
    && SECRET_KEY=build-only SPARKOPS_VAR_DIR=/tmp/build-var sparkops collectstatic --noinput -v0 && rm -rf /tmp/build-var
# Not root: a user of its own, owning only the state directory (a volume in docker-compose.yml).
RUN useradd --system --uid 10001 --home-dir /var/lib/sparkops --shell /usr/sbin/nologin sparkops \
    && mkdir -p /var/lib/sparkops && chown sparkops:sparkops /var/lib/sparkops && chmod 0750 /var/lib/sparkops
USER sparkops
WORKDIR /var/lib/sparkops
EXPOSE 8000
CMD ["uvicorn", "sparkops.asgi:application", "--host", "0.0.0.0", "--port", "8000"]
