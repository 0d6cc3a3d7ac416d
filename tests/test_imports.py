"""Every module of the product and the simulator imports (after Django's setup): a type that only
the type checker knows (`forms.ModelForm[Any]` outside quotes) fails at import time, in whichever
process first loads that module, which mypy cannot see (it once stopped every fleet worker)."""

import importlib
import pkgutil

import pytest

SKIP = (".migrations.", "__main__")


def _modules():
    for package in ("dashboard", "sparkops", "simulator"):
        top = importlib.import_module(package)
        for info in pkgutil.walk_packages(top.__path__, package + "."):
            if not any(part in info.name for part in SKIP):
                yield info.name


@pytest.mark.parametrize("package", ["dashboard", "sparkops", "simulator"])
def test_every_module_imports(package):
    failed = {}
    for name in (m for m in _modules() if m.split(".")[0] == package):
        try:
            importlib.import_module(name)
        except SystemExit:  # a script's module that exits when run without its arguments
            continue
        except Exception as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"
    assert not failed, failed
    assert len(list(m for m in _modules() if m.split(".")[0] == package)) > 3  # it walked the package
