"""How much of the product's code is typed: the functions (def and async def, methods and nested
functions included) of each product package, and the fraction fully annotated — every parameter
but a method's self or cls annotated (*args and **kwargs too), and a return annotation.
Migrations are left out: Django writes them.

    python tools/annotations.py              # dashboard, sparkops, simulator and the total
    python tools/annotations.py --min 60     # exit 1 when the total is under 60 %
    python tools/annotations.py --missing sparkops/collectors   # the functions still to annotate

Counted from the source (ast), never imported: a module that needs Django set up counts the same.
tests/test_annotations.py counts a fixture tree of known functions."""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("dashboard", "sparkops", "simulator")
FunctionNode = ast.FunctionDef | ast.AsyncFunctionDef


@dataclass(frozen=True)
class Function:
    """One def of a module: where it is and whether it is fully annotated."""

    path: Path
    line: int
    name: str
    annotated: bool


@dataclass(frozen=True)
class Tally:
    """A package's count: its functions and how many are fully annotated."""

    package: str
    functions: int
    annotated: int

    @property
    def percent(self) -> float:
        return 100.0 * self.annotated / self.functions if self.functions else 0.0


def fully_annotated(node: FunctionNode, *, method: bool) -> bool:
    """NODE has a return annotation and every parameter annotated, bar a method's first (self or cls)."""
    args = node.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
    present = [p for p in params if p is not None]
    positional = [*args.posonlyargs, *args.args]
    if method and positional and positional[0].arg in ("self", "cls") and not _is_static(node):
        present.remove(positional[0])
    return node.returns is not None and all(p.annotation is not None for p in present)


def _is_static(node: FunctionNode) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in node.decorator_list)


def functions_in(tree: ast.AST, path: Path) -> Iterator[Function]:
    """Every def in TREE, at any depth; a def directly in a class body is a method."""

    def walk(node: ast.AST, *, in_class: bool) -> Iterator[Function]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, FunctionNode):
                yield Function(path, child.lineno, child.name, fully_annotated(child, method=in_class))
                yield from walk(child, in_class=False)
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, in_class=True)
            else:
                yield from walk(child, in_class=False)

    return walk(tree, in_class=False)


def modules(package_dir: Path) -> Iterator[Path]:
    """The package's .py files, its migrations left out."""
    for path in sorted(package_dir.rglob("*.py")):
        if "migrations" not in path.relative_to(package_dir).parts:
            yield path


def package_functions(root: Path, package: str) -> list[Function]:
    return [
        function
        for path in modules(root / package)
        for function in functions_in(ast.parse(path.read_text(), filename=str(path)), path)
    ]


def tally(root: Path, packages: tuple[str, ...] | list[str]) -> list[Tally]:
    """One Tally per package under ROOT, then their total (package "total")."""
    rows = []
    for package in packages:
        found = package_functions(root, package)
        rows.append(Tally(package, len(found), sum(f.annotated for f in found)))
    rows.append(Tally("total", sum(r.functions for r in rows), sum(r.annotated for r in rows)))
    return rows


def table(rows: list[Tally]) -> str:
    lines = [f"{'package':<12} {'functions':>9} {'annotated':>9} {'%':>6}"]
    lines += [f"{r.package:<12} {r.functions:>9} {r.annotated:>9} {r.percent:>6.1f}" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "packages", nargs="*", default=list(PACKAGES), help="packages under --root (default: %(default)s)"
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout (default: this one)")
    parser.add_argument("--min", type=float, metavar="PCT", help="exit 1 when the total is under PCT %%")
    parser.add_argument("--missing", metavar="PATH", help="list the functions under PATH not fully annotated")
    args = parser.parse_args(argv)
    rows = tally(args.root, args.packages)
    print(table(rows))
    if args.missing:
        prefix = (args.root / args.missing).resolve()
        for package in args.packages:
            for f in package_functions(args.root, package):
                if not f.annotated and f.path.resolve().is_relative_to(prefix):
                    print(f"{f.path.relative_to(args.root)}:{f.line}: {f.name}")
    total = rows[-1]
    if args.min is not None and total.percent < args.min:
        print(f"annotated: {total.percent:.1f} % of {total.functions} functions, under the floor of {args.min:g} %")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
