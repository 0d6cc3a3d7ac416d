"""tools/annotations.py on a fixture tree whose every function is known: which count as fully
annotated, that nested defs and methods count, that migrations do not, and the --min floor."""

import importlib.util
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

APP = """
import typing


def typed(a: int, *, b: str = "") -> None: ...


def no_return(a: int): ...


def one_bare(a: int, b) -> int: ...


async def typed_async(a: int) -> int:
    def nested_bare(x): ...

    async def nested_typed(x: int) -> int: ...

    return 1


def bare_star(*args: int, **kwargs) -> None: ...


class Thing:
    def method(self, a: int) -> int: ...

    def method_bare(self, a) -> int: ...

    @classmethod
    def make(cls) -> "Thing": ...

    @staticmethod
    def static(self) -> None: ...

    class Inner:
        def __init__(self) -> None: ...

    lam = staticmethod(lambda x: x)


def not_a_method(self) -> None: ...
"""
# typed, typed_async, nested_typed, method, make, Inner.__init__: 6 of 13 functions.
APP_FUNCTIONS, APP_ANNOTATED = 13, 6


def annotations():
    spec = importlib.util.spec_from_file_location("tools_annotations", ROOT / "tools" / "annotations.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["tools_annotations"] = module  # its dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def fixture_tree(root: Path) -> Path:
    app = root / "app"
    (app / "sub" / "migrations").mkdir(parents=True)
    (app / "__init__.py").write_text("")
    (app / "core.py").write_text(textwrap.dedent(APP))
    (app / "sub" / "__init__.py").write_text("def helper(x: int) -> int:\n    return x\n")
    (app / "sub" / "migrations" / "0001_initial.py").write_text("def forwards(apps, schema_editor):\n    pass\n")
    lib = root / "lib"
    lib.mkdir()
    (lib / "__init__.py").write_text("def f(x: int) -> int:\n    return x\n\n\ndef g(x):\n    return x\n")
    return root


def test_counts_every_def_and_which_are_fully_annotated(tmp_path):
    tool = annotations()
    rows = {r.package: r for r in tool.tally(fixture_tree(tmp_path), ["app", "lib"])}
    # The migration's def is not counted; sub/__init__'s helper is.
    assert (rows["app"].functions, rows["app"].annotated) == (APP_FUNCTIONS + 1, APP_ANNOTATED + 1)
    assert (rows["lib"].functions, rows["lib"].annotated) == (2, 1)
    assert (rows["total"].functions, rows["total"].annotated) == (APP_FUNCTIONS + 3, APP_ANNOTATED + 2)
    assert rows["lib"].percent == 50.0


def test_missing_names_the_unannotated_and_min_is_a_floor(tmp_path, capsys):
    tool = annotations()
    root = fixture_tree(tmp_path)
    assert tool.main(["app", "lib", "--root", str(root), "--min", "40", "--missing", "app"]) == 0
    out = capsys.readouterr().out
    missing = {line.split(": ")[-1] for line in out.splitlines() if line.startswith("app/")}
    assert missing == {"no_return", "one_bare", "nested_bare", "bare_star", "method_bare", "static", "not_a_method"}
    assert "total" in out and "lib/" not in out
    # 8 of 16: 50 % is under a floor of 50.1.
    assert tool.main(["app", "lib", "--root", str(root), "--min", "50.1"]) == 1
    assert "under the floor of 50.1 %" in capsys.readouterr().out


def test_the_product_packages_are_counted():
    """The real tree: each product package has functions, and the script's default is all three."""
    rows = annotations().tally(ROOT, ["dashboard", "sparkops", "simulator"])
    assert [r.package for r in rows] == ["dashboard", "sparkops", "simulator", "total"]
    assert all(r.functions > 0 for r in rows) and rows[-1].functions == sum(r.functions for r in rows[:-1])
