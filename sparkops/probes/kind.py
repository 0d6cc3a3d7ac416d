"""Quality probes as a measured-run kind: what differs from a benchmark, declared for the core
(sparkops/measured/kinds.py)."""

from sparkops.measured.kinds import Kind

from .models import ProbeProfile, ProbeRun

PROBE = Kind(
    label="probe",
    namespace="probes",
    what="probe",
    profile_model=ProbeProfile,
    run_model=ProbeRun,
    create="sparkops.probes.services.probe_run_create",
    execute="sparkops.probes.services.probe_run_execute",
    summary="sparkops.probes.services.probe_summary",
    noun="Probe",
    run_noun="Probe run",
)
