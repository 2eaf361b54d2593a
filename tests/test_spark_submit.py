"""A real ``spark-submit`` of the batch job with the project shipped as a packed environment.

With a compiled core, ``--py-files amqpscope.zip`` can no longer ship amqpscope (a zip cannot
carry the extension module), so executors get a packed virtualenv: ``venv-pack`` of an environment
holding amqpscope (with its ``_native`` extension) and pyarrow, shipped with
``--archives env.tar.gz#env`` and run through ``spark.pyspark.python=./env/bin/python``.

The master is ``local-cluster[1,2,1024]``: a real standalone master, worker and executor JVM, in
processes of their own. (Plain ``local[N]`` runs the Python workers inside the driver's JVM and
does not unpack archives into their working directory, so ``./env/bin/python`` would not exist:
spark-notes §4.) ``PYTHONPATH`` is removed from the environment of spark-submit: the executors can
import amqpscope and pyarrow only from the packed environment. The driver, in client mode, is this
interpreter, which finds the checkout through a launcher script (on a cluster the driver has
amqpscope installed, or runs in cluster mode from the same archive).

The environment is made the way docs/batch.md describes, except that the packages are copied
from this interpreter's installation instead of downloaded (no network in the test): a venv made
with ``--copies`` (Spark unpacks archives with a tar that refuses links leaving the directory;
venv's default ``bin/python`` is such a link), amqpscope's package directory (what ``pip install``
puts there), pyarrow and orjson, packed with gzip level 1 (~60 MB).
"""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pyarrow.dataset as pads
import pytest
from table_reference import actual_rows

from amqpscope.spark import schema

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.spark


def _site(env: Path) -> Path:
    out = subprocess.run([str(env / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    return Path(out)


def packed_env(where: Path) -> Path:
    """A venv with amqpscope and what its executors import, packed with venv-pack."""
    venv_pack = pytest.importorskip("venv_pack")
    if not list((ROOT / "amqpscope").glob("_native*.so")):
        pytest.skip("the native core is not built in the checkout (amqpscope/_native*.so)")
    env = where / "env"
    subprocess.run([sys._base_executable, "-m", "venv", "--copies", "--without-pip", str(env)], check=True)  # type: ignore[attr-defined]
    site = _site(env)
    for name in ("pyarrow", "orjson"):
        dist = md.distribution(name)
        for f in dist.files or []:
            src = Path(str(dist.locate_file(f)))
            if src.is_file() and ".." not in f.parts and "__pycache__" not in f.parts:
                (site / f).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, site / f)
    shutil.copytree(ROOT / "amqpscope", site / "amqpscope", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    archive = where / "env.tar.gz"
    venv_pack.pack(prefix=str(env), output=str(archive), compress_level=1, verbose=False)
    shutil.rmtree(env)  # only the archive is used from here on
    return archive


def read(out: Path, name: str) -> list[dict[str, Any]]:
    if not (out / name).exists():
        return []
    return pads.dataset(str(out / name), format="parquet", partitioning="hive").to_table().to_pylist()


def test_spark_submit_with_a_packed_environment(tmp_path: Path, captures_dir: Path) -> None:
    pytest.importorskip("pyspark")
    import pyspark

    submit = Path(sys.executable).with_name("spark-submit")
    if not submit.exists() or shutil.which("java") is None:
        pytest.skip("spark-submit or java not found")
    archive = packed_env(tmp_path)
    inputs = tmp_path / "in"
    inputs.mkdir()
    shutil.copy(captures_dir / "s02_pika_confirms.pcap", inputs / "s02.pcap")
    (inputs / "garbage.pcap").write_bytes(b"not a capture\n" * 10)
    launcher = tmp_path / "amqpscope_batch.py"
    launcher.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                        "from amqpscope.spark.job import main\nsys.exit(main())\n")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    env.update(SPARK_HOME=os.path.dirname(pyspark.__file__), SPARK_LOCAL_IP="127.0.0.1")
    out = tmp_path / "out"
    cmd = [str(submit), "--master", "local-cluster[1,2,1024]", "--archives", f"{archive}#env",
           "--conf", "spark.pyspark.python=./env/bin/python", "--conf", f"spark.pyspark.driver.python={sys.executable}",
           "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
           "--conf", "spark.ui.enabled=false", "--conf", "spark.ui.showConsoleProgress=false",
           str(launcher), str(inputs), "--out", str(out)]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "2 captures" in proc.stdout and "error: " in proc.stdout  # garbage.pcap: an errors row

    # the same tables as decode --format parquet of the same inputs, in this process
    from amqpscope.spark.local import write_tables

    write_tables([str(inputs)], str(tmp_path / "local"))
    for name in ("events", "messages", "connections", "findings"):
        got = Counter(actual_rows(schema.TABLES[name], read(out, name)))
        want = Counter(actual_rows(schema.TABLES[name], read(tmp_path / "local", name)))
        assert got == want and got, name
    errors = read(out, "errors")
    assert [(Path(r["capture"]).name, r["error"]) for r in errors] == [("garbage.pcap", "NotACapture")]
