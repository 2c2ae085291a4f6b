"""A real Flower deployment on loopback for the tests: TLS certificates, SuperNode keys, processes by pid, the
environment every Flower process gets (telemetry and update check off, the outbound guard loaded through
``sitecustomize``, its refusals logged to a file the tests read), and a run's own status as the SuperLink
records it (``flwr ls``)."""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from outbound_guard.outbound import unexplained

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "flower"
GUARD = Path(__file__).resolve().parent / "outbound_guard"
CONNECTION = "fedsample-test"
QUIET = {"FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1", "RAY_USAGE_STATS_ENABLED": "0"}


def flower_env(folder: Path, **extra: str) -> dict:
    """The environment of every Flower process a test starts: its own Flower home under ``folder``, this
    checkout's fedsample first on the path, Flower's telemetry and update check and Ray's usage statistics off
    (the simulation runtime runs on Ray), and the outbound guard
    (tests/outbound_guard) loaded in every Python process, logging refusals to ``folder/outbound.log``."""
    path = [str(GUARD), str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "FLWR_HOME": str(folder / "flwr"), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            "PYTHONPATH": os.pathsep.join(p for p in path if p), "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1",
            "FEDSAMPLE_OUTBOUND_LOG": str(folder / "outbound.log"), **QUIET, **extra}


def outbound_attempts(folder: Path) -> list[str]:
    """What the guard refused in the processes started with :func:`flower_env` (empty when nothing tried)."""
    log = folder / "outbound.log"
    return log.read_text().splitlines() if log.exists() else []


def unexplained_outbound(folder: Path) -> list[str]:
    """The refused attempts other than Ray's dashboard's cloud-metadata probe (``outbound.RAY_CLOUD_PROBE``)."""
    return unexplained(outbound_attempts(folder))


def environment_of(pid: int) -> dict[str, str]:
    """A running process's environment (empty when it is gone or unreadable)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return {}
    return dict(item.split("=", 1) for item in raw.decode(errors="replace").split("\0") if "=" in item)


def run_id_of(output: str) -> int:
    """The run id ``flwr run`` printed."""
    found = re.search(r"Successfully started run (\d+)", output)
    if found is None:
        raise AssertionError(f"flwr run started no run:\n{output[-3000:]}")
    return int(found.group(1))


def run_status(flwr, run_id: int, connection: str) -> tuple[str, str]:
    """(status, details) of a run as the SuperLink records it (``flwr ls --run-id``): "finished:completed" for a
    ServerApp that returned, "finished:failed" with the reason for one that raised."""
    listed = flwr("ls", connection, "--run-id", str(run_id), "--format", "json")
    document = json.loads(listed.stdout[listed.stdout.index("{"):])
    run = document["runs"][0]
    return run["status"], run["status-details"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _pem(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def write_certificates(folder: Path) -> dict[str, Path]:
    """A throwaway CA and a server certificate for 127.0.0.1/localhost signed by it (PEM files)."""
    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP384R1()), ec.generate_private_key(ec.SECP384R1())
    ca = (x509.CertificateBuilder().subject_name(_name("fedsample test CA")).issuer_name(_name("fedsample test CA"))
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True).sign(ca_key, hashes.SHA256()))
    names = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    cert = (x509.CertificateBuilder().subject_name(_name("127.0.0.1")).issuer_name(ca.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName(names), critical=False).sign(ca_key, hashes.SHA256()))
    private = serialization.PrivateFormat.TraditionalOpenSSL
    return {
        "ca": _pem(folder / "ca.crt", ca.public_bytes(serialization.Encoding.PEM)),
        "cert": _pem(folder / "server.pem", cert.public_bytes(serialization.Encoding.PEM)),
        "key": _pem(folder / "server.key", key.private_bytes(serialization.Encoding.PEM, private, serialization.NoEncryption())),
    }


def write_node_keys(folder: Path, name: str) -> tuple[Path, Path]:
    """A SuperNode's P-384 key pair in OpenSSH format (as `ssh-keygen -t ecdsa -b 384` writes it)."""
    key = ec.generate_private_key(ec.SECP384R1())
    private = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption())
    public = key.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return _pem(folder / f"{name}.key", private), _pem(folder / f"{name}.pub", public)


@dataclass
class Deployment:
    """A SuperLink and SuperNodes started as child processes; :meth:`stop` ends each one by its pid."""

    folder: Path
    env: dict
    port: int = 0
    certificates: dict = field(default_factory=dict)
    processes: dict = field(default_factory=dict)

    def start_simulation_superlink(self, http_port: int, control_port: int) -> None:
        """A SuperLink in simulation mode, started as ``flwr run`` starts one for a ``:local:`` connection (same
        arguments; Flower's default runtime dependency installation on), on the ports the environment's
        FLWR_LOCAL_SUPERLINK_HTTP_API_PORT / FLWR_LOCAL_CONTROL_API_PORT name (Flower 1.41 serves every API on
        the HTTP port and ignores the control address)."""
        self.start("superlink", [str(BIN / "flower-superlink"), "--insecure", "--simulation", "--isolation", "subprocess",
                                 "--control-api-address", f"127.0.0.1:{control_port}", "--host", "127.0.0.1",
                                 "--port", str(http_port), "--database", str(self.folder / "state.db")])
        self.wait_for_port(http_port, "superlink")

    def start(self, name: str, argv: list[str]) -> subprocess.Popen:
        log = open(self.folder / f"{name}.log", "wb")
        process = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.processes[name] = process
        return process

    def log(self, name: str) -> str:
        return (self.folder / f"{name}.log").read_text(errors="replace")

    def start_superlink(self) -> None:
        self.certificates = write_certificates(self.folder)
        self.port = free_port()
        self.start("superlink", [str(BIN / "flower-superlink"), "--host", "127.0.0.1", "--port", str(self.port),
                                 "--ssl-ca-certfile", str(self.certificates["ca"]), "--ssl-certfile", str(self.certificates["cert"]),
                                 "--ssl-keyfile", str(self.certificates["key"]), "--enable-supernode-auth",
                                 "--disable-runtime-dependency-installation", "--database", str(self.folder / "state.db")])
        home = Path(self.env["FLWR_HOME"])
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n\n[superlink.{CONNECTION}]\naddress = "127.0.0.1:{self.port}"\n'
            f'root-certificates = "{self.certificates["ca"]}"\n')
        self.wait_for_port(self.port, "superlink")

    def wait_for_port(self, port: int, name: str, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.processes[name].poll() is not None:
                raise RuntimeError(f"{name} exited:\n{self.log(name)[-3000:]}")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"{name} does not listen on {port}:\n{self.log(name)[-3000:]}")

    def flwr(self, *args: str, timeout: float = 120.0) -> subprocess.CompletedProcess:
        return subprocess.run([str(BIN / "flwr"), *args], env=self.env, capture_output=True, text=True, timeout=timeout)

    def start_supernode(self, partition: int, node_config: str = "") -> str:
        name = f"supernode-{partition}"
        private, public = write_node_keys(self.folder, name)
        registered = self.flwr("supernode", "register", str(public), CONNECTION)
        if registered.returncode != 0:
            raise RuntimeError(f"flwr supernode register failed: {registered.stdout}{registered.stderr}")
        config = f"partition-id={partition} {node_config}".strip()
        self.start(name, [str(BIN / "flower-supernode"), "--superlink", f"127.0.0.1:{self.port}",
                          "--root-certificates", str(self.certificates["ca"]), "--auth-supernode-private-key", str(private),
                          "--node-config", config,  # Flower derives the public key from the private one
                          "--host", "127.0.0.1", "--port", str(free_port())])
        return name

    def kill(self, name: str) -> None:
        """End one process (and its children: a SuperNode's ClientApp processes) by its process group."""
        process = self.processes[name]
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)

    def stop(self) -> None:
        """End every process started here, then what Flower detached from them (SuperExec, ServerApp and
        ClientApp processes name their parent with ``--parent-pid``), each by its pid."""
        detached = flower_descendants({p.pid for p in self.processes.values()})
        for name in list(self.processes):
            try:
                self.kill(name)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                pass
        for pid in detached | flower_descendants(detached):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _processes() -> dict[int, tuple[int, list[str]]]:
    """{pid: (parent pid, command line)} of the processes this user can read."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                argv = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            found[int(entry.name)] = (int(stat.rsplit(")", 1)[1].split()[1]), argv)
    return found


def flower_descendants(roots: set[int]) -> set[int]:
    """Processes descended from ``roots``, by parent pid or by Flower's ``--parent-pid`` argument."""
    table, found, grew = _processes(), set(), True
    while grew:
        known = roots | found
        more = {pid for pid, (ppid, argv) in table.items() if pid not in known and (ppid in known or _named_parent(argv) in known)}
        found |= more
        grew = bool(more)
    return found


def _named_parent(argv: list[str]) -> int | None:
    if "--parent-pid" in argv and argv.index("--parent-pid") + 1 < len(argv):
        value = argv[argv.index("--parent-pid") + 1]
        return int(value) if value.isdigit() else None
    return None
