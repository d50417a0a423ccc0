"""The graded kernel's seccomp filter: the system calls a kernel never needs, refused (grader only).

bubblewrap loads a classic BPF program (``bwrap --seccomp FD``) into the sandbox's first
process before it starts the kernel; the kernel and everything it starts (Ray included) inherit
it, and no process can take it off. :func:`build_filter` writes that program for this machine's
architecture: ``struct sock_filter`` instructions packed with :mod:`struct`, as
``seccomp_export_bpf`` from libseccomp would write them. The program:

1. refuses with ``ENOSYS`` a call made with another architecture's calling convention (a 32-bit
   ``int 0x80`` on x86_64, say: its numbers mean other calls), and every call numbered from
   :data:`FIRST_UNKNOWN_NR` on (calls newer than this filter, and x86_64's x32 calls, whose
   numbers carry bit 30): a process sees the answer an older kernel would give;
2. refuses with ``EPERM`` (:data:`REFUSED`): the kernel keyring (``add_key``, ``request_key``,
   ``keyctl``: keys outlive the process and are shared by every process of the same uid, so one
   kernel could leave a message for the next); joining namespaces (``setns``); reading or
   changing another process (``ptrace``, ``process_vm_readv``/``writev``, ``kcmp``,
   ``pidfd_getfd``, ``process_madvise``); mounting and changing root (``mount``, ``umount2``,
   ``pivot_root``, ``chroot`` and the new mount API); loading code into the kernel or
   watching it (``bpf``, ``perf_event_open``, ``userfaultfd``, kernel modules, ``kexec``);
   and the calls that administer the machine (``reboot``, ``swapon``, ``acct``, ``syslog``,
   quotas, the clock, host names, x86 port I/O);
3. refuses ``clone`` and ``unshare`` with ``EPERM`` when they ask for a new namespace
   (:data:`NAMESPACE_FLAGS`: a new user namespace would give the kernel uid 0 and every
   capability inside it), and ``clone3`` with ``ENOSYS``, because its flags are in a struct
   that a filter cannot read: the C library then falls back to ``clone``, which it can;
4. refuses ``io_uring`` with ``ENOSYS`` (a large kernel interface nothing here uses; callers
   fall back to ordinary calls, as on a kernel built without it);
5. lets ``personality`` only set or query the ordinary Linux personalities
   (:data:`PERSONALITIES`); other flags (``ADDR_NO_RANDOMIZE`` turns address randomization
   off) get ``EPERM``;
6. allows everything else.

A refused call returns an error; nothing is killed, so an honest library that tries a call
and falls back keeps working. Supported architectures: x86_64 and aarch64 (:data:`ARCHES`);
for another one :func:`build_filter` raises :class:`SeccompUnsupported`.
"""

from __future__ import annotations

import errno
import platform
import struct
from dataclasses import dataclass

__all__ = ["Arch", "ARCHES", "SeccompUnsupported", "REFUSED", "REFUSED_ENOSYS", "NAMESPACE_FLAGS",
           "PERSONALITIES", "FIRST_UNKNOWN_NR", "build_filter", "arch_for", "describe"]

#: System calls refused with EPERM, by what they would reach.
REFUSED: dict[str, tuple[str, ...]] = {
    "the kernel keyring": ("add_key", "request_key", "keyctl"),
    "other namespaces": ("setns",),
    "other processes": ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
                        "process_madvise"),
    "mounts and the root folder": ("mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree",
                                   "open_tree_attr", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
                                   "name_to_handle_at", "open_by_handle_at"),
    "code in the kernel, and watching it": ("bpf", "perf_event_open", "userfaultfd", "init_module", "finit_module",
                                            "delete_module", "kexec_load", "kexec_file_load", "lookup_dcookie"),
    "the machine's administration": ("reboot", "swapon", "swapoff", "acct", "syslog", "quotactl", "quotactl_fd",
                                     "vhangup", "sethostname", "setdomainname", "settimeofday", "clock_settime",
                                     "iopl", "ioperm", "modify_ldt", "uselib", "ustat", "sysfs"),
}
#: System calls refused with ENOSYS, so that callers take their fallback path.
REFUSED_ENOSYS = ("clone3", "io_uring_setup", "io_uring_enter", "io_uring_register")
#: ``clone``/``unshare`` flags that make a new namespace: CLONE_NEWNS, CLONE_NEWCGROUP,
#: CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET (and, for
#: ``unshare`` only, CLONE_NEWTIME, whose bit is part of the exit signal in ``clone``).
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000
CLONE_NEWTIME = 0x00000080
#: The ``personality`` values allowed: PER_LINUX, PER_LINUX32, UNAME26 alone and with
#: PER_LINUX32, and 0xffffffff (a query).
PERSONALITIES = (0x0, 0x8, 0x20000, 0x20008, 0xFFFFFFFF)
#: Calls numbered from here on get ENOSYS: newer than this filter (Linux 6.18 numbers its
#: newest call 469, ``file_setattr``; numbers from 424 on are the same on every architecture),
#: and, on x86_64, the x32 calls (numbered from 0x40000000).
FIRST_UNKNOWN_NR = 470


class SeccompUnsupported(RuntimeError):
    """This machine's architecture has no syscall table here, so no filter can be built for it."""


@dataclass(frozen=True)
class Arch:
    """One architecture's facts for the filter.

    Attributes:
        name: ``platform.machine()``'s name for it.
        audit_arch: the ``AUDIT_ARCH_*`` value the kernel puts in ``seccomp_data.arch``.
        numbers: syscall name -> number, for every call the filter names.
        arg0_low_offset: byte offset of the low 32 bits of the first argument in
            ``struct seccomp_data`` (16 on a little-endian machine).
    """

    name: str
    audit_arch: int
    numbers: dict[str, int]
    arg0_low_offset: int = 16


# From the kernel's arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h
# (aarch64); tests/test_sandbox.py checks every number against libseccomp's own tables.
_COMMON = {"pidfd_getfd": 438, "process_madvise": 440, "quotactl_fd": 443, "open_tree": 428, "move_mount": 429,
           "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442, "open_tree_attr": 467,
           "clone3": 435, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427}
X86_64 = Arch("x86_64", 0xC000003E, {
    **_COMMON, "add_key": 248, "request_key": 249, "keyctl": 250, "setns": 308, "ptrace": 101, "process_vm_readv": 310,
    "process_vm_writev": 311, "kcmp": 312, "kexec_load": 246, "kexec_file_load": 320, "init_module": 175,
    "finit_module": 313, "delete_module": 176, "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "reboot": 169,
    "swapon": 167, "swapoff": 168, "acct": 163, "syslog": 103, "quotactl": 179, "lookup_dcookie": 212, "vhangup": 153,
    "sethostname": 170, "setdomainname": 171, "settimeofday": 164, "clock_settime": 227, "iopl": 172, "ioperm": 173,
    "modify_ldt": 154, "uselib": 134, "ustat": 136, "sysfs": 139, "mount": 165, "umount2": 166, "pivot_root": 155,
    "chroot": 161, "name_to_handle_at": 303, "open_by_handle_at": 304, "clone": 56, "unshare": 272,
    "personality": 135})
AARCH64 = Arch("aarch64", 0xC00000B7, {
    **_COMMON, "add_key": 217, "request_key": 218, "keyctl": 219, "setns": 268, "ptrace": 117, "process_vm_readv": 270,
    "process_vm_writev": 271, "kcmp": 272, "kexec_load": 104, "kexec_file_load": 294, "init_module": 105,
    "finit_module": 273, "delete_module": 106, "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "reboot": 142,
    "swapon": 224, "swapoff": 225, "acct": 89, "syslog": 116, "quotactl": 60, "lookup_dcookie": 18, "vhangup": 58,
    "sethostname": 161, "setdomainname": 162, "settimeofday": 170, "clock_settime": 112, "mount": 40, "umount2": 39,
    "pivot_root": 41, "chroot": 51, "name_to_handle_at": 264, "open_by_handle_at": 265, "clone": 220, "unshare": 97,
    "personality": 92})
#: The architectures a filter can be built for, by ``platform.machine()`` name.
ARCHES = {"x86_64": X86_64, "amd64": X86_64, "aarch64": AARCH64, "arm64": AARCH64}

# Classic BPF, as in <linux/bpf_common.h> and <linux/seccomp.h>.
_LD_W_ABS = 0x20       # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15            # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35            # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45           # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06            # BPF_RET | BPF_K
_ALLOW = 0x7FFF0000    # SECCOMP_RET_ALLOW
_NR_OFFSET, _ARCH_OFFSET = 0, 4  # struct seccomp_data: int nr; __u32 arch; __u64 ip; __u64 args[6]
_MAX_INSTRUCTIONS = 4096  # BPF_MAXINSNS


def _errno(code: int) -> int:
    return 0x00050000 | code  # SECCOMP_RET_ERRNO


def arch_for(machine: str | None = None) -> Arch:
    """The :class:`Arch` of ``machine`` (default: this machine's ``platform.machine()``).

    Raises:
        SeccompUnsupported: for an architecture not in :data:`ARCHES`.
    """
    machine = machine or platform.machine()
    try:
        return ARCHES[machine.lower()]
    except KeyError:
        raise SeccompUnsupported(
            f"no seccomp filter for the {machine!r} architecture: the grader knows the system call numbers of "
            f"{', '.join(sorted({a.name for a in ARCHES.values()}))} only. Grade on one of those, or add this "
            "architecture's numbers to raydata_grader.seccomp_filter") from None


def _instruction(code: int, k: int, jt: int = 0, jf: int = 0) -> tuple[int, int, int, int]:
    return code, jt, jf, k


def _program(arch: Arch) -> list[tuple[int, int, int, int]]:
    arg0 = arch.arg0_low_offset
    ins = [_instruction(_LD_W_ABS, _ARCH_OFFSET),
           _instruction(_JEQ, arch.audit_arch, jt=1),
           _instruction(_RET, _errno(errno.ENOSYS)),
           _instruction(_LD_W_ABS, _NR_OFFSET),
           _instruction(_JGE, FIRST_UNKNOWN_NR, jf=1),
           _instruction(_RET, _errno(errno.ENOSYS))]
    plain = {name: errno.EPERM for names in REFUSED.values() for name in names}
    plain.update({name: errno.ENOSYS for name in REFUSED_ENOSYS})
    for name, code in sorted(plain.items(), key=lambda item: arch.numbers.get(item[0], -1)):
        if name not in arch.numbers:  # a call this architecture does not have (x86's port I/O on aarch64)
            continue
        ins += [_instruction(_JEQ, arch.numbers[name], jf=1), _instruction(_RET, _errno(code))]
    for name, flags in (("clone", NAMESPACE_FLAGS), ("unshare", NAMESPACE_FLAGS | CLONE_NEWTIME)):
        # flags are the first argument's low 32 bits (the kernel reads no more of them)
        ins += [_instruction(_JEQ, arch.numbers[name], jf=4),
                _instruction(_LD_W_ABS, arg0),
                _instruction(_JSET, flags, jf=1),
                _instruction(_RET, _errno(errno.EPERM)),
                _instruction(_RET, _ALLOW)]
    allowed = len(PERSONALITIES)
    ins += [_instruction(_JEQ, arch.numbers["personality"], jf=allowed + 3), _instruction(_LD_W_ABS, arg0)]
    ins += [_instruction(_JEQ, value, jt=allowed - i) for i, value in enumerate(PERSONALITIES)]
    ins += [_instruction(_RET, _errno(errno.EPERM)), _instruction(_RET, _ALLOW)]
    ins.append(_instruction(_RET, _ALLOW))
    return ins


def build_filter(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (default: this one) as ``bwrap --seccomp FD`` reads it.

    Returns:
        The program's ``struct sock_filter`` array (8 bytes an instruction, this machine's byte
        order): what ``seccomp_export_bpf`` writes.

    Raises:
        SeccompUnsupported: for an architecture not in :data:`ARCHES`.
    """
    ins = _program(arch_for(machine))
    if len(ins) > _MAX_INSTRUCTIONS:  # pragma: no cover - the tables are far smaller
        raise ValueError(f"the seccomp program has {len(ins)} instructions, over the kernel's {_MAX_INSTRUCTIONS}")
    return b"".join(struct.pack("=HBBI", *i) for i in ins)


def describe() -> str:
    """One line for the grader's log: what the filter refuses."""
    return ("a seccomp filter refuses the keyring, new and other namespaces, tracing other processes, mounts, "
            "bpf, perf events, userfaultfd, io_uring, kernel modules and the machine's administration")
