"""A private, loopback-only RabbitMQ node for samples, benchmarks and live tests.

``PrivateBroker`` starts its own RabbitMQ node (the Debian ``rabbitmq-server``
package) with:

* its own node name (``amqpscope-<pid>-<n>@localhost``) and Erlang cookie;
* its own AMQP port, Erlang distribution port, epmd port and CLI distribution
  port range, all free ports searched upwards from 25672, all bound to
  127.0.0.1 only (the node also starts its own epmd on the private port, bound
  to loopback, so the system epmd on 4369 is neither needed nor disturbed);
* its own data, log and config directory (a temporary directory removed at exit);
* no plugins (no management listener);
* users ``guest``/``guest`` (vhost ``/``; guest is loopback-only by default) and
  ``alice``/``s3cret`` (vhost ``scope``, only resources named ``alice.*``;
  a vhost ``private`` where alice has no permissions), as in the shared captures.

Usage::

    with PrivateBroker() as broker:
        pika.ConnectionParameters("127.0.0.1", broker.port)
        broker.ctl("list_queues")

Everything it starts (the node, its epmd, the CLI tools) is stopped at exit.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import hashlib
import itertools
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from amqpscope.testing.tlscerts import Certificates

RABBITMQ_BIN = Path(os.environ.get("AMQPSCOPE_RABBITMQ_BIN", "/usr/lib/rabbitmq/bin"))
"""Directory of the real RabbitMQ scripts.

The ``/usr/sbin`` wrappers of the Debian package ``su`` to the ``rabbitmq`` user
when run as root, which drops our environment: the scripts are run directly.
"""

LOOPBACK = "127.0.0.1"
DEFAULT_PORT_BASE = 25672
AMQP_HEADER = b"AMQP\x00\x00\x09\x01"

_counter = itertools.count()
_reserved: set[int] = set()  # ports allocated to brokers of this process (CLI ranges are not bound)


class BrokerError(RuntimeError):
    """The private broker could not be started or controlled."""


def rabbitmq_available() -> bool:
    """True when the RabbitMQ server scripts and Erlang are installed."""
    return (RABBITMQ_BIN / "rabbitmq-server").is_file() and shutil.which("erl") is not None


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((LOOPBACK, port))
        except OSError:
            return False
    # Also refuse ports something listens on via the wildcard address.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.settimeout(0.2)
        return s.connect_ex((LOOPBACK, port)) != 0


def find_free_ports(count: int, start: int = DEFAULT_PORT_BASE, exclude: set[int] | None = None) -> list[int]:
    """Return ``count`` distinct free loopback TCP ports, searching upwards from ``start``."""
    found: list[int] = []
    skip = exclude or set()
    port = start
    while len(found) < count:
        if port > 65535:
            raise BrokerError(f"no {count} free ports above {start}")
        if port not in skip and _port_free(port):
            found.append(port)
        port += 1
    return found


def find_free_range(size: int, start: int, exclude: set[int]) -> int:
    """Return the first port ``p >= start`` such that ``p .. p+size-1`` are all free."""
    port = start
    while port + size <= 65536:
        block = range(port, port + size)
        bad = [p for p in block if p in exclude or not _port_free(p)]
        if not bad:
            return port
        port = bad[-1] + 1
    raise BrokerError(f"no {size} consecutive free ports above {start}")


def rabbit_password_hash(password: str, salt: bytes | None = None) -> str:
    """RabbitMQ's ``rabbit_password_hashing_sha256`` hash, as used in definitions files."""
    salt = os.urandom(4) if salt is None else salt
    digest = hashlib.sha256(salt + password.encode("utf-8")).digest()
    return base64.b64encode(salt + digest).decode("ascii")


def _definitions() -> dict[str, object]:
    algo = "rabbit_password_hashing_sha256"
    full = {"configure": ".*", "write": ".*", "read": ".*"}
    alice_only = {"configure": r"^alice\.", "write": r"^alice\.|^amq\.", "read": r"^alice\.|^amq\."}
    return {
        "users": [
            {
                "name": "guest",
                "password_hash": rabbit_password_hash("guest"),
                "hashing_algorithm": algo,
                "tags": ["administrator"],
                "limits": {},
            },
            {
                "name": "alice",
                "password_hash": rabbit_password_hash("s3cret"),
                "hashing_algorithm": algo,
                "tags": [],
                "limits": {},
            },
        ],
        "vhosts": [{"name": "/"}, {"name": "scope"}, {"name": "private"}],
        "permissions": [
            {"user": "guest", "vhost": "/", **full},
            {"user": "guest", "vhost": "scope", **full},
            {"user": "guest", "vhost": "private", **full},
            {"user": "alice", "vhost": "scope", **alice_only},
        ],
        "topic_permissions": [],
        "parameters": [],
        "global_parameters": [],
        "policies": [],
        "queues": [],
        "exchanges": [],
        "bindings": [],
    }


class PrivateBroker:
    """Context manager running a private loopback-only RabbitMQ node.

    Attributes available once started: ``port`` (AMQP), ``node`` (Erlang node name),
    ``dist_port``, ``epmd_port``, ``base_dir``, ``startup_seconds``.
    """

    def __init__(
        self,
        port: int | None = None,
        *,
        port_base: int = DEFAULT_PORT_BASE,
        startup_timeout: float = 60.0,
        extra_config: str = "",
        keep_dir: bool = False,
        tls: bool = False,
        tls_versions: tuple[str, ...] = ("tlsv1.3", "tlsv1.2"),
        tls_ciphers: tuple[str, ...] = (),
        tls_session_tickets: bool = False,
    ) -> None:
        self._requested_port = port
        self._port_base = port_base
        self._startup_timeout = startup_timeout
        self._extra_config = extra_config
        self._keep_dir = keep_dir
        self.node = f"amqpscope-{os.getpid()}-{next(_counter)}@localhost"
        self.port = 0
        self.dist_port = 0
        self.epmd_port = 0
        self.ctl_dist_min = 0
        self.base_dir: Path | None = None
        self.startup_seconds = 0.0
        self._proc: subprocess.Popen[bytes] | None = None
        self._env: dict[str, str] = {}
        self._stdout: Path | None = None
        self._ports: set[int] = set()
        self.tls = tls
        self.tls_versions = tls_versions
        self.tls_ciphers = tls_ciphers  # OpenSSL/IANA names; forces the suite on the broker's side
        self.tls_session_tickets = tls_session_tickets  # TLS 1.3 stateless tickets: resumption (PSK)
        self.tls_port = 0
        self.ca_file: Path | None = None  # the harness's CA, for clients to verify the broker

    # -- context manager -------------------------------------------------

    def __enter__(self) -> PrivateBroker:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- public API ------------------------------------------------------

    @property
    def url(self) -> str:
        """AMQP URL for guest on vhost ``/``."""
        return f"amqp://guest:guest@{LOOPBACK}:{self.port}/%2F"

    def start(self) -> None:
        """Start the node and wait until its AMQP listener answers (``startup_seconds``)."""
        if self._proc is not None:
            raise BrokerError("broker already started")
        if not rabbitmq_available():
            raise BrokerError("rabbitmq-server is not installed (run tools/install-system-deps.sh)")
        t0 = time.monotonic()
        # A port found free may be taken before the node binds it (parallel test runs):
        # with automatically chosen ports, try again further up.
        attempts = 1 if self._requested_port is not None else 3
        for attempt in range(attempts):
            try:
                self._start_once()
                break
            except BrokerError:
                if attempt == attempts - 1:
                    raise
                self._port_base = self.ctl_dist_min + 11
        self.startup_seconds = time.monotonic() - t0
        atexit.register(self.stop)

    def _start_once(self) -> None:
        t0 = time.monotonic()
        self._allocate_ports()
        self.base_dir = Path(tempfile.mkdtemp(prefix="amqpscope-broker-"))
        self._write_files()
        self._stdout = self.base_dir / "stdout.log"
        with open(self._stdout, "wb") as out:
            self._proc = subprocess.Popen(
                [str(RABBITMQ_BIN / "rabbitmq-server")],
                env=self._env,
                cwd=self.base_dir,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        try:
            self._wait_ready(t0)
        except BaseException:
            self.stop()
            raise

    def ctl(self, *args: str, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``rabbitmqctl -n NODE ARGS...`` against this broker."""
        return self._cli("rabbitmqctl", *args, check=check, timeout=timeout)

    def diagnostics(self, *args: str, check: bool = True, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run ``rabbitmq-diagnostics -n NODE ARGS...`` against this broker."""
        return self._cli("rabbitmq-diagnostics", *args, check=check, timeout=timeout)

    def stop(self) -> None:
        """Stop the node (SIGTERM, then SIGKILL), its epmd, and remove its directory."""
        atexit.unregister(self.stop)
        proc, self._proc = self._proc, None
        if proc is not None:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    proc.wait(timeout=10)
            # Leftovers of the node's process group (erl_child_setup, inet_gethost...).
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
        self._kill_epmd()
        self._release_ports()
        if self.base_dir is not None and not self._keep_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None

    def log_text(self) -> str:
        """Startup output and node log, for error messages."""
        parts: list[str] = []
        if self._stdout is not None and self._stdout.exists():
            parts.append(self._stdout.read_text(errors="replace"))
        if self.base_dir is not None:
            for log in sorted((self.base_dir / "log").glob("*.log")):
                parts.append(f"--- {log.name}\n{log.read_text(errors='replace')}")
        return "\n".join(parts)

    # -- internals -------------------------------------------------------

    def _allocate_ports(self) -> None:
        self._release_ports()
        taken: set[int] = set(_reserved)
        if self._requested_port is not None:
            self.port = self._requested_port
        else:
            (self.port,) = find_free_ports(1, self._port_base, taken)
        taken.add(self.port)
        self.dist_port, self.epmd_port = find_free_ports(2, self.port + 1, taken)
        taken |= {self.dist_port, self.epmd_port}
        if self.tls:
            (self.tls_port,) = find_free_ports(1, self.epmd_port + 1, taken)
            taken.add(self.tls_port)
        # rabbitmqctl's own (hidden) node needs a listen port range for distribution.
        self.ctl_dist_min = find_free_range(11, self.epmd_port + 1, taken)
        self._ports = {self.port, self.dist_port, self.epmd_port, *range(self.ctl_dist_min, self.ctl_dist_min + 11)}
        if self.tls_port:
            self._ports.add(self.tls_port)
        _reserved.update(self._ports)

    def _release_ports(self) -> None:
        _reserved.difference_update(self._ports)
        self._ports = set()

    def _write_files(self) -> None:
        assert self.base_dir is not None
        base = self.base_dir
        for sub in ("mnesia", "log", "plugins-expand", "home"):
            (base / sub).mkdir()
        cookie = base / "home" / ".erlang.cookie"
        cookie.write_text(base64.b32encode(os.urandom(20)).decode("ascii").rstrip("="))
        cookie.chmod(0o400)
        (base / "enabled_plugins").write_text("[].\n")
        (base / "definitions.json").write_text(json.dumps(_definitions(), indent=1))
        (base / "rabbitmq-env.conf").write_text("# intentionally empty: environment is set by PrivateBroker\n")
        config = "\n".join(
            [
                f"listeners.tcp.1 = 127.0.0.1:{self.port}",
                *self._tls_config(base),
                "loopback_users.guest = true",
                f"load_definitions = {base / 'definitions.json'}",
                "log.file.level = info",
                "log.console = false",
                # Tiny test boxes: never block publishers because of disk or memory.
                "disk_free_limit.absolute = 1MB",
                "vm_memory_high_watermark.relative = 0.8",
                self._extra_config,
                "",
            ]
        )
        (base / "rabbitmq.conf").write_text(config)
        dist_args = "-kernel inet_dist_use_interface {127,0,0,1}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update(
            {
                "HOME": str(base / "home"),
                "RABBITMQ_NODENAME": self.node,
                "RABBITMQ_USE_LONGNAME": "false",
                "RABBITMQ_NODE_IP_ADDRESS": LOOPBACK,
                "RABBITMQ_NODE_PORT": str(self.port),
                "RABBITMQ_DIST_PORT": str(self.dist_port),
                "RABBITMQ_CTL_DIST_PORT_MIN": str(self.ctl_dist_min),
                "RABBITMQ_CTL_DIST_PORT_MAX": str(self.ctl_dist_min + 10),
                "RABBITMQ_CTL_ERL_ARGS": dist_args,
                "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": dist_args,
                "ERL_EPMD_PORT": str(self.epmd_port),
                "ERL_EPMD_ADDRESS": LOOPBACK,
                "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),
                "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
                "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
                "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
                "RABBITMQ_LOG_BASE": str(base / "log"),
                "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
                "RABBITMQ_PLUGINS_EXPAND_DIR": str(base / "plugins-expand"),
                "RABBITMQ_PID_FILE": str(base / "rabbitmq.pid"),
                "RABBITMQ_ALLOW_INPUT": "",
            }
        )
        self._env = env

    def _tls_config(self, base: Path) -> list[str]:
        """The TLS listener (a CA and a server certificate made here with openssl)."""
        if not self.tls:
            return ["listeners.ssl = none"]
        from amqpscope.testing.tlscerts import make_certificates

        certs = make_certificates(base / "tls")
        self.ca_file = certs.ca
        if self.tls_session_tickets:
            # rabbitmq.conf has no key for session tickets; advanced.config replaces ssl_options
            # as a whole, so all of them go there
            self._advanced_ssl_options(base, certs)
            return [f"listeners.ssl.1 = 127.0.0.1:{self.tls_port}"]
        lines = [
            f"listeners.ssl.1 = 127.0.0.1:{self.tls_port}",
            f"ssl_options.cacertfile = {certs.ca}",
            f"ssl_options.certfile = {certs.cert}",
            f"ssl_options.keyfile = {certs.key}",
            "ssl_options.verify = verify_none",
            "ssl_options.fail_if_no_peer_cert = false",
            "ssl_options.honor_cipher_order = true",
        ]
        lines += [f"ssl_options.versions.{i} = {v}" for i, v in enumerate(self.tls_versions, 1)]
        lines += [f"ssl_options.ciphers.{i} = {c}" for i, c in enumerate(self.tls_ciphers, 1)]
        return lines

    def _advanced_ssl_options(self, base: Path, certs: Certificates) -> None:
        def s(text: object) -> str:
            return json.dumps(str(text))  # an Erlang string: the same quoting for these paths

        opts = [f"{{cacertfile, {s(certs.ca)}}}", f"{{certfile, {s(certs.cert)}}}", f"{{keyfile, {s(certs.key)}}}",
                "{verify, verify_none}", "{fail_if_no_peer_cert, false}", "{honor_cipher_order, true}",
                "{session_tickets, stateless}",
                "{versions, [" + ", ".join(f"'{v}'" for v in self.tls_versions) + "]}"]  # fmt: skip
        if self.tls_ciphers:
            opts.append("{ciphers, [" + ", ".join(s(c) for c in self.tls_ciphers) + "]}")
        (base / "advanced.config").write_text("[{rabbit, [{ssl_options, [" + ", ".join(opts) + "]}]}].\n")

    def _cli(self, tool: str, *args: str, check: bool, timeout: float) -> subprocess.CompletedProcess[str]:
        if not self.node or not self._env:
            raise BrokerError("broker not started")
        cmd = [str(RABBITMQ_BIN / tool), "-q", "-n", self.node, *args]
        res = subprocess.run(
            cmd,
            env=self._env,
            cwd=self.base_dir,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and res.returncode != 0:
            raise BrokerError(f"{tool} {' '.join(args)} failed ({res.returncode}):\n{res.stdout}\n{res.stderr}")
        return res

    def _amqp_ready(self) -> bool:
        """True when the listener answers the protocol header with this node's connection.start."""
        try:
            with socket.create_connection((LOOPBACK, self.port), timeout=1.0) as s:
                return self._own_start(s)
        except OSError:
            return False

    def _tls_ready(self) -> bool:
        """True when the TLS listener is this node's: its certificate verifies with this broker's
        own CA and it answers with this node's connection.start. (Ports are found free before the
        node binds them: on a machine where other test runs start brokers too, another node may
        take one first, and a client would then talk to it.)"""
        ctx = ssl.create_default_context(cafile=str(self.ca_file))
        ctx.set_ciphers("ALL")  # whatever single suite the broker is restricted to
        try:
            with socket.create_connection((LOOPBACK, self.tls_port), timeout=1.0) as raw, \
                    ctx.wrap_socket(raw, server_hostname="localhost") as s:  # fmt: skip
                return self._own_start(s)
        except OSError:  # ssl.SSLError included
            return False

    def _own_start(self, s: socket.socket) -> bool:
        s.sendall(AMQP_HEADER)
        data = b""
        while len(data) < 7 or len(data) < 8 + int.from_bytes(data[3:7], "big"):
            chunk = s.recv(65536)
            if not chunk or len(data) > 1 << 16:
                break
            data += chunk
        # a method frame (type 1) on channel 0 whose server properties name this node (cluster_name)
        name = self.node.split("@", 1)[0].encode()
        return len(data) >= 3 and data[0] == 1 and data[1:3] == b"\x00\x00" and name in data

    def _wait_ready(self, t0: float) -> None:
        assert self._proc is not None
        deadline = t0 + self._startup_timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise BrokerError(
                    f"rabbitmq-server exited with {self._proc.returncode} during startup:\n" + self.log_text()[-4000:]
                )
            if self._amqp_ready() and (not self.tls or self._tls_ready()):
                return
            time.sleep(0.05)
        raise BrokerError(
            f"rabbitmq-server did not accept AMQP on {LOOPBACK}:{self.port} "
            f"within {self._startup_timeout:.0f}s:\n" + self.log_text()[-4000:]
        )

    def _kill_epmd(self) -> None:
        if not self.epmd_port:
            return
        epmd = shutil.which("epmd") or "/usr/lib/erlang/bin/epmd"
        if not os.path.exists(epmd):
            return
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "ERL_EPMD_PORT": str(self.epmd_port)}
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            subprocess.run(
                [epmd, "-port", str(self.epmd_port), "-kill"],
                env=env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=10,
            )
