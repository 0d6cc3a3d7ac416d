"""Pointing the collectors at a running `simulator.client.Simulation` (its systemctl,
journalctl and /proc stand-ins), for the fixtures that start one."""


def point_collectors_at(sim, settings, monkeypatch, *, gpu=True, host_root=True):
    """SETTINGS (pytest-django's) and the environment aimed at SIM: systemd, the journal and /proc;
    with GPU, its nvidia-smi; with HOST_ROOT, its box root (meminfo, PSI, unit files)."""
    monkeypatch.setenv("SPARKOPS_SIM_STATE_DIR", str(sim.state_dir))
    settings.SPARKOPS_SYSTEMCTL = str(sim.bin_dir / "sim-systemctl")
    settings.SPARKOPS_JOURNALCTL = str(sim.bin_dir / "sim-journalctl")
    settings.SPARKOPS_PROC_ROOT = str(sim.state_dir / "proc")
    if gpu:
        settings.SPARKOPS_NVIDIA_SMI = str(sim.bin_dir / "sim-nvidia-smi")
        settings.SPARKOPS_GPU_BACKEND = "nvidia-smi"
    if host_root:
        settings.SPARKOPS_HOST_ROOT = str(sim.root)
