"""The sandbox's seccomp filter and uid leases, as units (no sandbox needed).

tests/test_sandbox.py checks what the filter refuses from inside a real sandbox; here: the
syscall numbers against libseccomp's own tables (libseccomp2 is on every Debian system, as a
dependency of apt), the program's shape, the refusal of an unknown architecture, and the uid
leases' locks.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import struct
import sys

import pytest

from raydata_grader.sandbox_uids import UidsExhausted, lease_uid, uids_with_keys
from raydata_grader.seccomp_filter import (ARCHES, FIRST_UNKNOWN_NR, REFUSED, REFUSED_ENOSYS, SeccompUnsupported,
                                           arch_for, build_filter)

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="seccomp is Linux's")


def _libseccomp():
    path = ctypes.util.find_library("seccomp")
    assert path, "libseccomp is not installed (Debian: apt-get install libseccomp2): the tables can't be checked"
    lib = ctypes.CDLL(path)
    lib.seccomp_syscall_resolve_name_arch.argtypes = (ctypes.c_uint32, ctypes.c_char_p)
    lib.seccomp_syscall_resolve_name_arch.restype = ctypes.c_int
    return lib


@linux_only
@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_every_syscall_number_is_libseccomps(machine):
    """Each number the filter uses is the one libseccomp's table gives for that architecture;
    a call too new for the installed libseccomp must be in the range that every architecture
    numbers alike (424 on) and have one number everywhere."""
    lib, arch = _libseccomp(), arch_for(machine)
    names = {n for group in REFUSED.values() for n in group} | set(REFUSED_ENOSYS) | {"clone", "unshare", "personality"}
    wrong, unknown = [], []
    for name in sorted(names):
        theirs = lib.seccomp_syscall_resolve_name_arch(arch.audit_arch, name.encode())
        ours = arch.numbers.get(name)
        if theirs >= 0 and ours != theirs:
            wrong.append(f"{name}: ours {ours}, libseccomp {theirs}")
        elif theirs < 0 and ours is not None:
            unknown.append(name)
            same = {a.numbers.get(name) for a in ARCHES.values()}
            assert 424 <= ours < FIRST_UNKNOWN_NR and same == {ours}, (name, same)
    assert not wrong, wrong
    assert len(unknown) <= 2, f"libseccomp does not know {unknown}: is it very old?"


def test_the_program_is_well_formed():
    """Whole 8-byte instructions, within the kernel's 4,096, starting with the architecture check
    and ending by allowing what nothing refused."""
    for machine in ("x86_64", "aarch64"):
        program = build_filter(machine)
        assert len(program) % 8 == 0 and 10 < len(program) // 8 < 4096
        first = struct.unpack("=HBBI", program[:8])
        last = struct.unpack("=HBBI", program[-8:])
        assert first == (0x20, 0, 0, 4)  # load seccomp_data.arch
        assert last == (0x06, 0, 0, 0x7FFF0000)  # return SECCOMP_RET_ALLOW


def _run_filter(program: bytes, arch: int, nr: int, arg0: int = 0) -> int:
    """What the kernel would do with the classic BPF ``program`` for one call: its return value."""
    ins = [struct.unpack("=HBBI", program[i:i + 8]) for i in range(0, len(program), 8)]
    data = struct.pack("=iIQ6Q", nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = ins[pc]
        if code == 0x20:  # ld [k]
            acc = struct.unpack_from("=I", data, k)[0]
            pc += 1
        elif code in (0x15, 0x35, 0x45):  # jeq, jge, jset
            hit = {0x15: acc == k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += 1 + (jt if hit else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")


@pytest.mark.parametrize("machine", ["x86_64", "aarch64"])
def test_the_program_decides_every_call_as_the_tables_say(machine):
    """Every call number from 0 to past the newest, run through the program: the refused ones
    get their errno, the conditional ones decide on their flags, every other one is allowed."""
    arch = arch_for(machine)
    eperm, enosys, allow = 0x50000 | errno.EPERM, 0x50000 | errno.ENOSYS, 0x7FFF0000
    program = build_filter(machine)
    expected = {arch.numbers[n]: eperm for group in REFUSED.values() for n in group if n in arch.numbers}
    expected.update({arch.numbers[n]: enosys for n in REFUSED_ENOSYS})
    special = {arch.numbers[n] for n in ("clone", "unshare", "personality")}
    for nr in range(FIRST_UNKNOWN_NR + 30):
        want = enosys if nr >= FIRST_UNKNOWN_NR else expected.get(nr, allow)
        if nr not in special:
            assert _run_filter(program, arch.audit_arch, nr, 0x10000000) == want, (machine, nr)
    assert _run_filter(program, arch.audit_arch, 0x40000000 + 1) == enosys  # x32's numbers
    assert _run_filter(program, 0x40000003, 1) == enosys  # i386's calling convention
    clone, unshare, personality = (arch.numbers[n] for n in ("clone", "unshare", "personality"))
    for flags, want in ((0x11, allow), (0x10000011, eperm), (0x20000, eperm), (0x400, allow)):
        assert _run_filter(program, arch.audit_arch, clone, flags) == want, hex(flags)
        assert _run_filter(program, arch.audit_arch, unshare, flags) == want, hex(flags)
    assert _run_filter(program, arch.audit_arch, unshare, 0x80) == eperm  # CLONE_NEWTIME
    assert _run_filter(program, arch.audit_arch, clone, 0x80) == allow  # in clone, part of the exit signal
    for persona, want in ((0, allow), (0xFFFFFFFF, allow), (8, allow), (0x40000, eperm), (0x400000, eperm)):
        assert _run_filter(program, arch.audit_arch, personality, persona) == want, hex(persona)


def test_an_unknown_architecture_is_refused_with_a_clear_error():
    with pytest.raises(SeccompUnsupported, match="'sparc64'.*aarch64, x86_64"):
        build_filter("sparc64")


@linux_only
def test_uid_leases_are_distinct_locked_and_given_back(tmp_path):
    locks = tmp_path / "uids"
    base = 0x70000000 + 4096 * 8  # a range no test or grading run uses
    a, b = lease_uid(locks, base, 2), lease_uid(locks, base, 2)
    assert {a.uid, b.uid} == {base, base + 1}
    assert oct(locks.stat().st_mode & 0o777) == "0o700"
    with pytest.raises(UidsExhausted, match="all 2 sandbox uids"):
        lease_uid(locks, base, 2)
    a.release()
    a.release()  # twice is harmless
    c = lease_uid(locks, base, 2)
    assert c.uid == a.uid
    b.release(), c.release()


@linux_only
def test_a_uid_that_runs_a_process_or_holds_keys_is_never_leased(tmp_path):
    with pytest.raises(UidsExhausted):
        lease_uid(tmp_path / "uids", os.getuid(), 1)  # this process runs as it
    key_users = tmp_path / "key-users"
    key_users.write_text("    0:     9 8/8 3/1000000 40/25000000\n 1879048200:     1 0/0 0/200 0/20000\n"
                         " 1879048201:     2 2/2 2/200 40/20000\n")
    assert uids_with_keys(key_users) == {0, 1879048201}
    assert uids_with_keys(tmp_path / "missing") == set()


@linux_only
def test_a_lock_folder_others_can_write_is_refused(tmp_path):
    locks = tmp_path / "uids"
    locks.mkdir(mode=0o777)
    locks.chmod(0o777)
    with pytest.raises(PermissionError, match="no one else can write"):
        lease_uid(locks, 0x70000000 + 4096 * 9, 1)
