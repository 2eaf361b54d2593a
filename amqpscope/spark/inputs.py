"""Finding the captures named on the command line and opening them as streams, anywhere.

Inputs are files, directories (searched recursively for capture names), globs, and Hadoop
filesystem URIs (``file://``, ``hdfs://``, ``s3a://``, …). Local paths are listed with the standard
library; other schemes through the JVM's Hadoop ``FileSystem`` of the Spark session (the cluster's
configuration and credentials apply). Executors open a capture as a stream — a local ``open`` or a
``pyarrow.fs`` input stream — and decode it as it is read, so a capture of any size (also over
2 GiB, where ``binaryFile`` fails) needs only the decoder's bounded memory.
"""

from __future__ import annotations

import fnmatch
import glob
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import IO, Any
from urllib.parse import urlparse

# Names searched for inside directories (an explicitly named file is taken whatever its name).
CAPTURE_PATTERNS = ("*.pcap", "*.pcapng", "*.cap", "*.pcap.*", "*.pcapng.*", "*.cap.*")
_NOT_CAPTURES = ("*.csv", "*.json", "*.txt", "*.md", "*.crc")


@dataclass(frozen=True, slots=True)
class Capture:
    uri: str  # normalised: file:///abs/path for local files
    size: int | None

    @property
    def capture_id(self) -> str:
        """Stable partition value: ``c`` + 16 hex digits of the URI's SHA-1.

        From the URI, not the content: two copies of a capture are two captures. The ``c`` prefix
        stops Spark from inferring an all-digit id as a number when it reads the partitions.
        """
        return "c" + hashlib.sha1(self.uri.encode()).hexdigest()[:16]


class InputError(Exception):
    """An input names nothing (no such file, empty glob, empty directory)."""


def is_capture_name(name: str) -> bool:
    base = os.path.basename(name.rstrip("/"))
    if any(fnmatch.fnmatch(base, p) for p in _NOT_CAPTURES):
        return False
    return any(fnmatch.fnmatch(base, p) for p in CAPTURE_PATTERNS)


def is_local(spec: str) -> bool:
    scheme = urlparse(spec).scheme
    return scheme in ("", "file") or len(scheme) == 1  # len 1: a Windows drive letter


def local_path(spec: str) -> str:
    return urlparse(spec).path if spec.startswith("file:") else spec


def file_uri(path: str) -> str:
    return "file://" + os.path.abspath(path)


def list_local(spec: str) -> list[Capture]:
    path = local_path(spec)
    if os.path.isdir(path):
        found = []
        for root, dirs, files in os.walk(path):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))  # skip _SUCCESS dirs, .git
            found += [os.path.join(root, f) for f in sorted(files) if is_capture_name(f)]
        if not found:
            raise InputError(f"no capture files in directory {spec!r}")
        return [Capture(file_uri(f), os.path.getsize(f)) for f in found]
    if glob.has_magic(path):
        matches = sorted(glob.glob(path, recursive=True))
        out = []
        for m in matches:
            out += list_local(m) if os.path.isdir(m) else [Capture(file_uri(m), os.path.getsize(m))]
        if not out:
            raise InputError(f"no files match {spec!r}")
        return out
    if not os.path.exists(path):
        raise InputError(f"no such file or directory: {spec!r}")
    # a named file is taken even if unreadable: the executor reports it as an ``errors`` row
    return [Capture(file_uri(path), os.path.getsize(path))]


def list_hadoop(spark: Any, spec: str) -> list[Capture]:
    """List a Hadoop URI (glob or directory, recursively) through the session's JVM."""
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()
    path = jvm.org.apache.hadoop.fs.Path(spec)
    fs = path.getFileSystem(conf)
    statuses = fs.globStatus(path) or []
    out: list[Capture] = []
    for st in statuses:
        if st.isDirectory():
            it = fs.listFiles(st.getPath(), True)
            while it.hasNext():
                f = it.next()
                name = _uri(f.getPath())
                if is_capture_name(name) and not _hidden(name, _uri(st.getPath())):
                    out.append(Capture(name, int(f.getLen())))
        else:
            out.append(Capture(_uri(st.getPath()), int(st.getLen())))
    if not out:
        raise InputError(f"no capture files at {spec!r}")
    return out


def _uri(path: Any) -> str:
    """A Hadoop ``Path`` as the URI the local listing gives (``file:/x`` is ``file:///x`` there)."""
    text = str(path.toString())
    if text.startswith("file:/") and not text.startswith("file://"):
        return "file://" + text[len("file:") :]
    return text


def _hidden(name: str, root: str) -> bool:
    return any(part.startswith((".", "_")) for part in name[len(root) :].split("/")[:-1])


def list_inputs(specs: Iterable[str], spark: Any = None) -> list[Capture]:
    """Every capture named by ``specs``, each once, in a stable order."""
    seen: dict[str, Capture] = {}
    for spec in specs:
        if is_local(spec):
            found = list_local(spec)
        elif spark is None:
            raise InputError(f"{spec!r}: listing a Hadoop filesystem needs a Spark session")
        else:
            found = list_hadoop(spark, spec)
        for cap in found:
            seen.setdefault(cap.uri, cap)
    return list(seen.values())


def open_stream(uri: str) -> IO[bytes]:
    """A binary read stream of a capture, on the executor. Local files use ``open``; others
    ``pyarrow.fs`` (hdfs needs libhdfs and the Hadoop CLASSPATH on the node; ``s3a://`` is read as
    ``s3://`` with the usual AWS credentials)."""
    if is_local(uri):
        return open(local_path(uri), "rb")
    from pyarrow import fs as pafs

    if uri.startswith(("s3a://", "s3n://")):
        uri = "s3://" + uri.split("://", 1)[1]  # Hadoop's name for S3; pyarrow knows it as s3
    filesystem, path = pafs.FileSystem.from_uri(uri)
    stream: IO[bytes] = filesystem.open_input_stream(path, compression=None)  # the reader detects gzip etc.
    return stream


def open_output(uri: str) -> tuple[Any, str]:
    """(``pyarrow.fs`` filesystem, path) to write files under ``uri`` from an executor."""
    from pyarrow import fs as pafs

    if is_local(uri):
        return pafs.LocalFileSystem(), os.path.abspath(local_path(uri))
    if uri.startswith(("s3a://", "s3n://")):
        uri = "s3://" + uri.split("://", 1)[1]
    filesystem, path = pafs.FileSystem.from_uri(uri)
    return filesystem, path


def parse_size(text: str) -> int:
    """``64m``, ``1g``, ``500k`` or a byte count."""
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    try:
        if t and t[-1] in units:
            return int(float(t[:-1]) * units[t[-1]])
        return int(t)
    except ValueError:
        raise ValueError(f"not a size: {text!r} (use e.g. 64m, 1g)") from None
