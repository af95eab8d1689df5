"""The package itself: `mypy --strict` passes on its source, it ships `py.typed`, it depends on httpx
alone and supports Python 3.9, and every public name (and every public method of a public class)
has a docstring."""

import importlib.metadata
import inspect
import pathlib
import subprocess
import sys

import sandlot

SDK = pathlib.Path(__file__).resolve().parents[1]


def test_mypy_strict_passes_on_the_package():
    r = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-incremental", str(SDK / "sandlot")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "Success" in r.stdout


def test_the_installed_package_is_typed_and_needs_only_httpx():
    assert (pathlib.Path(sandlot.__file__).parent / "py.typed").is_file()
    meta = importlib.metadata.metadata("sandlot")
    assert meta["Requires-Python"] == ">=3.9"
    requires = importlib.metadata.requires("sandlot") or []
    assert [r.split(">")[0].split("<")[0].split("=")[0].strip() for r in requires] == ["httpx"]
    assert importlib.metadata.version("sandlot") == sandlot.__version__


def test_every_public_name_has_a_docstring():
    missing = []
    for name in sandlot.__all__:
        obj = getattr(sandlot, name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not inspect.getdoc(obj):
            missing.append(name)
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if attr.startswith("_"):
                    continue
                fn = member.__func__ if isinstance(member, (classmethod, staticmethod)) else member
                if (inspect.isfunction(fn) or isinstance(fn, property)) and not fn.__doc__:
                    missing.append(f"{name}.{attr}")
    assert missing == []
