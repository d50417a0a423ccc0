"""The Jupyter kernel manager of a sandboxed kernel (grader only).

:class:`SandboxedKernelManager` starts the kernel with the command of a
:class:`~raydata_grader.kernel_sandbox.KernelJail` in front of its own, over Jupyter's ``ipc``
transport (Unix sockets in the jail's connection folder: the kernel's network namespace has
only its own loopback). The connection folder is mounted at :data:`SANDBOX_IPC_DIR` inside
the sandbox, so the kernel's command line and its connection file name that folder, never
the grader's temporary folder it is on the host.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager
from traitlets import Int, List, Unicode

__all__ = ["SANDBOX_IPC_DIR", "MAX_MESSAGE_BYTES", "KERNEL_LOG_BYTES", "SandboxedKernelClient",
           "SandboxedKernelManager"]

#: Where the kernel's connection folder is, inside the sandbox.
SANDBOX_IPC_DIR = "/run/kernel"
#: The largest message the grader accepts from a sandboxed kernel, in bytes (ZeroMQ drops
#: the connection on a larger one; the cell then fails instead of the grader filling up).
MAX_MESSAGE_BYTES = 256 * 1024 * 1024
#: How much of a sandboxed kernel's own stdout and stderr reaches the grader's log, in bytes.
KERNEL_LOG_BYTES = 256 * 1024


def _forward_capped(stream, limit_bytes: int) -> None:
    """Copy ``stream`` to this process's stderr until ``limit_bytes``, then read and drop the rest."""
    written = dropped = 0
    for chunk in iter(lambda: stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536), b""):
        keep = chunk[:max(limit_bytes - written, 0)]
        if keep:
            sys.stderr.write(keep.decode("utf-8", "replace"))
            sys.stderr.flush()
        written += len(keep)
        dropped += len(chunk) - len(keep)
    if dropped:
        sys.stderr.write(f"\n[grader] {dropped:,} more bytes of the kernel's own output were dropped\n")


class SandboxedKernelClient(AsyncKernelClient):
    """The client of a sandboxed kernel: once the kernel first answers, before any cell can
    run, it has the manager lock the kernel's connection folder
    (:meth:`SandboxedKernelManager.lock_connection_folder`)."""

    async def wait_for_ready(self, timeout=None):
        await AsyncKernelClient.wait_for_ready(self, timeout=timeout)
        lock = getattr(self.parent, "lock_connection_folder", None)
        if lock is not None:
            lock()


class SandboxedKernelManager(AsyncKernelManager):
    """A Jupyter kernel manager that starts the kernel inside a
    :class:`~raydata_grader.kernel_sandbox.KernelJail`.

    The kernel uses the ``ipc`` transport (Unix sockets in the jail's connection folder: the
    kernel's network namespace has only its own loopback), reads its connection file there,
    and is interrupted by message (a signal would reach bubblewrap, not the kernel). The
    connection file names the folder as the kernel sees it (:data:`SANDBOX_IPC_DIR`), and so
    does the kernel's command line; this manager and its clients use the grader's path.
    """

    jail_prefix = List(Unicode(), help="the command that the kernel's own command follows").tag(config=True)
    ipc_dir = Unicode("", help="the jail's connection folder").tag(config=True)
    sandbox_uid = Int(-1, help="owner to give the connection file (-1: leave it)").tag(config=True)

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        if not self.jail_prefix or not self.ipc_dir:
            raise ValueError("SandboxedKernelManager needs jail_prefix and ipc_dir (see KernelJail)")
        self.client_factory = SandboxedKernelClient
        self.transport = "ipc"
        self.ip = str(Path(self.ipc_dir) / "kernel")
        self.connection_file = str(Path(self.ipc_dir) / "kernel.json")

    @property
    def kernel_spec(self):
        spec = super().kernel_spec
        if spec is not None and spec.interrupt_mode != "message":
            spec.interrupt_mode = "message"
        return spec

    @property
    def sandbox_connection_file(self) -> str:
        """The connection file's path inside the sandbox."""
        return f"{SANDBOX_IPC_DIR}/{Path(self.connection_file).name}"

    def write_connection_file(self, **kwargs) -> None:
        """Write the connection file, with the sockets' path as the kernel sees it.

        jupyter_client writes it with this manager's ``ip`` (the sockets' path prefix on the
        grader's side) and keeps that in memory for its clients; the file on disk, which only
        the kernel reads, then gets the same prefix inside the sandbox.
        """
        super().write_connection_file(**kwargs)
        if not os.path.exists(self.connection_file):
            return
        with open(self.connection_file) as f:
            info = json.load(f)
        info["ip"] = f"{SANDBOX_IPC_DIR}/{Path(self.ip).name}"
        fd = os.open(self.connection_file, os.O_WRONLY | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC)
        with os.fdopen(fd, "w") as f:
            json.dump(info, f, indent=2)
        if self.sandbox_uid >= 0:
            os.chown(self.connection_file, self.sandbox_uid, self.sandbox_uid)

    def _reconcile_connection_info(self, info) -> None:
        """jupyter_client's check, after the launch, that the connection file holds what the
        provisioner returned; here the file names the sockets as the kernel sees them (see
        :meth:`write_connection_file`), so that is what it must hold. Without this, the check
        finds the file different, removes it and writes it again while the kernel may be
        reading it or writing its own: a kernel start that failed now and then with
        ``FileNotFoundError`` on the connection file."""
        if os.path.exists(self.connection_file):
            try:
                with open(self.connection_file) as f:
                    on_disk = json.load(f)
                on_disk["key"] = on_disk["key"].encode()
            except (OSError, ValueError, KeyError, AttributeError):
                on_disk = None
            inside = {**info, "ip": f"{SANDBOX_IPC_DIR}/{Path(str(info.get('ip', ''))).name}"}
            if on_disk is not None and self._equal_connections(inside, on_disk) and self._equal_connections(
                    info, self.get_connection_info()):
                return
        super()._reconcile_connection_info(info)

    def lock_connection_folder(self) -> bool:
        """Once the kernel is up, take its connection folder back: return whether it was locked.

        The folder is the one path on the grader's disk the kernel can write to, and only for
        its start-up (its connection file and ZeroMQ sockets). As root, the folder and the
        connection file then belong to root again (0755, 0644): the kernel, uid
        :data:`SANDBOX_UID`, can neither add a file there nor grow one. Its sockets stay
        bound. Under a user namespace the kernel is the grader's own user, so nothing changes
        (False); the folder's files still end with the notebook.
        """
        if self.sandbox_uid < 0:
            return False
        folder = Path(self.ipc_dir)
        for entry in folder.iterdir():
            if entry.is_file() and not entry.is_symlink():
                os.chown(entry, 0, 0, follow_symlinks=False)
                entry.chmod(0o644)
        os.chown(folder, 0, 0)
        folder.chmod(0o755)
        return True

    def format_kernel_cmd(self, extra_arguments=None) -> list[str]:
        """The jail's command, then the kernel's, whose connection file is named as inside the sandbox."""
        own = [self.sandbox_connection_file if arg == self.connection_file else arg
               for arg in super().format_kernel_cmd(extra_arguments)]
        return list(self.jail_prefix) + own

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        # The kernel's own stdout and stderr (Ray's start-up messages, a crash's last words)
        # would be the grader's log file, which the kernel could fill: they go through a pipe
        # instead, of which the first KERNEL_LOG_BYTES reach the log.
        kw["stdout"] = subprocess.PIPE
        kw["stderr"] = subprocess.STDOUT
        result = await super()._async_launch_kernel(kernel_cmd, **kw)
        process = getattr(self.provisioner, "process", None)
        if process is not None and process.stdout is not None:
            threading.Thread(target=_forward_capped, args=(process.stdout, KERNEL_LOG_BYTES), daemon=True,
                             name="kernel-log").start()
        return result

    def client(self, **kwargs):
        """A client whose ZeroMQ sockets drop any message over :data:`MAX_MESSAGE_BYTES`."""
        import zmq

        kc = super().client(**kwargs)
        kc.context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        return kc
