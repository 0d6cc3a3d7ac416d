"""Only what pyproject.toml cannot say: the top-level templates/ and static/ of a checkout
ship inside the wheel as sparkops/templates and sparkops/static (package data), so an
installed SparkOps (no checkout, `pip install sparkops-….whl`) serves its pages and
stylesheets. They stay where they are in the checkout; sparkops/settings.py finds either.
The manual, when `make docs` has built it into site/, ships as sparkops/docs_site, which an
installed SparkOps serves at /docs/ (dashboard/views/docs.py); a wheel built without it serves
a page that says how to build it."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ASSET_DIRS = ("templates", "static")
DOCS_SITE = HERE / "site"


class BuildPyWithAssets(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install runs from the checkout, which has them already
        for name in ASSET_DIRS:
            source = HERE / name
            if not source.is_dir():
                raise SystemExit(f"setup.py: {source} is missing; a wheel without it serves no pages")
            shutil.copytree(
                source,
                Path(self.build_lib) / "sparkops" / name,
                dirs_exist_ok=True,
                ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".*"),
            )
        if (DOCS_SITE / "index.html").is_file():
            shutil.copytree(DOCS_SITE, Path(self.build_lib) / "sparkops" / "docs_site", dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildPyWithAssets})
