import pytest
from django.conf import settings as django_settings


@pytest.fixture
def sim_box(tmp_path, settings, monkeypatch):
    """A simulated box: a vLLM engine `nemotron` under its unit, the collectors pointed at it."""
    from simulator.client import Simulation

    with Simulation(engines=["vllm:nemotron,max_model_len=131072", "llamacpp:lla"], state_dir=tmp_path / "sim") as s:
        monkeypatch.setenv("SPARKOPS_SIM_STATE_DIR", str(s.state_dir))
        settings.SPARKOPS_SYSTEMCTL = str(s.bin_dir / "sim-systemctl")
        settings.SPARKOPS_JOURNALCTL = str(s.bin_dir / "sim-journalctl")
        settings.SPARKOPS_NVIDIA_SMI = str(s.bin_dir / "sim-nvidia-smi")
        settings.SPARKOPS_GPU_BACKEND = "nvidia-smi"
        settings.SPARKOPS_PROC_ROOT = str(s.state_dir / "proc")
        settings.SPARKOPS_HOST_ROOT = str(s.root)
        yield s


@pytest.fixture
def box_engines(sim_box, db):
    from dashboard.models import Engine, Host

    host = Host.objects.create(name=django_settings.SPARKOPS_HOST_NAME)
    return {
        name: Engine.objects.create(
            name=name, kind=kind, url=sim_box.url(name), host=host, unit=sim_box.unit(name), status="up"
        )
        for name, kind in (("nemotron", "vllm"), ("lla", "llamacpp"))
    }
