"""The package build of pyproject.toml raises no setuptools warning (packages and their data), and
the build backend leaves out only setuptools' editable-install notice."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
setuptools = pytest.importorskip("setuptools")
needs_build_setuptools = pytest.mark.skipif(
    int(setuptools.__version__.split(".")[0]) < 77, reason="pyproject.toml builds with setuptools >= 77"
)


@needs_build_setuptools
def test_build_py_raises_no_setuptools_warning(tmp_path: Path) -> None:
    argv = ["setup.py", "-q", "egg_info", "--egg-base", str(tmp_path), "build_py", "-d", str(tmp_path / "lib")]
    script = f"import sys, setuptools; sys.argv = {argv!r}; setuptools.setup()"
    # setuptools' warnings are UserWarnings: an error here, so the run fails on the first one
    res = subprocess.run([sys.executable, "-W", "error::UserWarning", "-c", script], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    specs = tmp_path / "lib" / "amqpscope" / "dissect" / "specs"
    assert sorted(p.name for p in specs.glob("*.xml")) == ["amqp0-9-1.xml", "amqp0-9.xml"]
    assert (tmp_path / "lib" / "amqpscope" / "_native.pyi").exists()


@needs_build_setuptools
def test_backend_filters_only_the_editable_notice(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(ROOT / "tools" / "backend"))
    import amqpscope_backend
    from setuptools.warnings import InformationOnly, SetuptoolsDeprecationWarning

    def build_editable(*_args: object) -> str:
        InformationOnly.emit("Editable installation.", "Please be careful with folders ...")
        SetuptoolsDeprecationWarning.emit("Something deprecated.", "kept")
        return "wheel"

    monkeypatch.setattr(amqpscope_backend.build_meta, "build_editable", build_editable)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert amqpscope_backend.build_editable("dist") == "wheel"
    assert [type(w.message) for w in seen] == [SetuptoolsDeprecationWarning]
    assert amqpscope_backend.build_wheel is setuptools.build_meta.build_wheel
