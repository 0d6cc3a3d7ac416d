"""Read-only API tokens: one user's key for scripts, Prometheus and Grafana (`Authorization:
Bearer …` on /api/… and /metrics). Shown once, stored as a SHA-256 digest, revocable."""
