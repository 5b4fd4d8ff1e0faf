"""The fault matrix: every host effect of the agent against the faults a host gives, through the
real agent (phases and interpreter) on simulated hosts. Each case ends in exactly one report whose one line
names the path or command, the errno in words and the fix; nothing is left half-written; and where the
agent ends having changed nothing (Skipped, RolledBack), the node's files are byte-identical.

Where the faults come from: a directory, a FIFO, a symlink leading out of the host root and a file over the
size cap are real files under the simulated root; EACCES, EROFS and ENOSPC, which a test running as root
cannot get from the kernel in a temp dir, are raised by eventedpleg_lab.sim.files by the man pages' rules;
a missing binary, a command that hangs past its timeout and a unit that fails to restart by
eventedpleg_lab.sim.host as agent.linuxhost reports them.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventedpleg import constants as c
from eventedpleg import protocol
from eventedpleg.agent.agent import Agent, AgentSettings, drive
from eventedpleg.agent.hostfiles import MAX_LIST_DEPTH, MAX_LIST_ENTRIES, MAX_READ, TEMP_PREFIX
from eventedpleg.core import hostcheck
from eventedpleg.core.node.blocks.effects import Report
from eventedpleg.models.nodeconfig import KubeletConfigMode
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim import profiles
from eventedpleg_lab.sim.clock import FakeClock
from eventedpleg_lab.sim.fakeapi import FakeApi
from eventedpleg_lab.sim.host import SimHost
from eventedpleg_lab.sim.profiles import HostProfile
from tests.agent.conftest import NAMESPACE, NODE, Rig, RigFactory

CRIO_DROPIN = f"/{c.CRIO_DROPIN_DIR}/{c.CRIO_DROPIN_NAME}"
KUBELET_DROPIN = f"{profiles.CONFIG_DIR}/{c.KUBELET_DROPIN_NAME}"
CONFIG = profiles.KUBEADM_CONFIG
STATE_DIR = f"/{c.AGENT_STATE_DIR}"
EDIT = KubeletConfigMode.EDIT_CONFIG_FILE
DROP_IN = KubeletConfigMode.DROP_IN_ONLY
ENDINGS = {NodeState.SKIPPED, NodeState.ROLLED_BACK, NodeState.FAILED, NodeState.DONE}
RETRY = f"`eventedpleg retry cluster --node {NODE}`"

Entry = tuple[str, bytes | None]  # a file's kind and its bytes (regular files only)


def tree(rig: Rig) -> dict[str, Entry]:
    """Every entry under the simulated root but the agent's own bookkeeping, by kind (a FIFO stays a FIFO)."""
    out: dict[str, Entry] = {}
    root = rig.host.root
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            if rel.startswith(c.AGENT_STATE_DIR):
                continue
            mode = path.lstat().st_mode
            out[rel] = (stat.filemode(mode)[0], path.read_bytes() if stat.S_ISREG(mode) else None)
    return out


def temp_files(rig: Rig) -> list[str]:
    return [str(p) for p in rig.host.root.rglob(f"{TEMP_PREFIX}*")]


def endings(rig: Rig) -> list[Report]:
    """The reports that end an apply (Verifying is a step on the way)."""
    return [e for e in rig.trace if isinstance(e, Report) and e.state in ENDINGS]


def outside(rig: Rig, *, directory: bool) -> Path:
    """A file (or a directory) outside the host root for a symlink to lead to."""
    if directory:
        target = rig.host.root.parent / "outside.d"
        target.mkdir(exist_ok=True)
        (target / "elsewhere.conf").write_text("# not the host's\n")
        return target
    target = rig.host.root.parent / "outside.conf"
    target.write_text("# not the host's\n")
    return target


def replace_with(kind: str, host_path: str) -> Callable[[Rig], None]:
    """Put a directory, a FIFO, a symlink leading out of the root or an over-size file at `host_path`."""

    def setup(rig: Rig) -> None:
        path = rig.path(host_path)
        path.parent.mkdir(parents=True, exist_ok=True)
        was_dir = path.is_dir() and not path.is_symlink()
        if was_dir:
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        if kind == "directory":
            path.mkdir()
            (path / "inside.conf").write_text("# a file inside\n")
        elif kind == "fifo":
            os.mkfifo(path)
        elif kind == "symlink-out":
            # Relative, climbing out: an absolute link is resolved from the host root, as the host does.
            path.symlink_to(os.path.relpath(outside(rig, directory=was_dir), path.parent))
        elif kind == "oversize":
            path.write_bytes(b"# big\n" + b"#" * MAX_READ)
        else:
            raise AssertionError(kind)

    return setup


def assert_reported(rig: Rig, state: NodeState, *words: str) -> str:
    """Exactly one ending, `state`, with every one of `words` in its one-line reason; its Event too."""
    ends = endings(rig)
    assert len(ends) == 1, [(e.state, e.reason) for e in ends]
    assert rig.state == state
    reason = rig.annotations[protocol.ANN_REASON]
    assert "\n" not in reason and "Traceback" not in reason
    assert "EXDEV" not in reason  # every write is made within the target's directory
    for word in words:
        assert word in reason, f"{word!r} not in {reason!r}"
    warnings = [e for e in rig.api.events if e.warning and e.reason != "Applying"]
    assert len(warnings) == 1 and warnings[0].message == reason
    assert not temp_files(rig)
    return reason


def fault_words(code: int) -> tuple[str, str]:
    return errno.errorcode[code], os.strerror(code)


@dataclass(frozen=True)
class Case:
    name: str
    profile: Callable[[], HostProfile]
    mode: KubeletConfigMode
    setup: Callable[[Rig], None]
    state: NodeState
    words: tuple[str, ...]  # in the reason, besides the retry command


def _denied(path: str) -> Callable[[Rig], None]:
    return lambda rig: rig.host.faults.files.denied.add(path)


def _read_only(path: str) -> Callable[[Rig], None]:
    return lambda rig: rig.host.faults.files.read_only.add(path)


def _immutable(path: str) -> Callable[[Rig], None]:
    return lambda rig: rig.host.faults.files.immutable.add(path)


def _unreadable(path: str) -> Callable[[Rig], None]:
    return lambda rig: rig.host.faults.files.unreadable.add(path)


def _full(path: str, times: int | None = None) -> Callable[[Rig], None]:
    def setup(rig: Rig) -> None:
        rig.host.faults.files.full.add(path)
        rig.host.faults.files.times = times

    return setup


def _over_quota(path: str) -> Callable[[Rig], None]:
    return lambda rig: rig.host.faults.files.over_quota.add(path)


def _many_files(host_dir: str, count: int) -> Callable[[Rig], None]:
    """`count` files in a directory the agent lists, one past the listing's cap."""

    def setup(rig: Rig) -> None:
        directory = rig.path(host_dir)
        directory.mkdir(parents=True, exist_ok=True)
        for i in range(count):
            (directory / f"{i:04}-site.conf").write_text("")

    return setup


def _deep_dirs(host_dir: str, depth: int) -> Callable[[Rig], None]:
    return lambda rig: rig.path(host_dir).joinpath(*["d"] * depth).mkdir(parents=True)


def _missing(name: str) -> Callable[[Rig], None]:
    return lambda rig: rig.host.faults.commands.missing.add(name)


def _hangs(*argv: str) -> Callable[[Rig], None]:
    return lambda rig: rig.host.faults.commands.hangs.update({argv: 1})


def _host_call(method: str, error: OSError) -> Callable[[Rig], None]:
    return lambda rig: rig.host.faults.host_calls.update({method: error})


def _restart_fails(rig: Rig) -> None:
    rig.host.faults.runtime.restart_fails = True


EISDIR, ENXIO, ELOOP, EFBIG = (fault_words(e) for e in (errno.EISDIR, errno.ENXIO, errno.ELOOP, errno.EFBIG))
EACCES, EROFS, ENOSPC = (fault_words(e) for e in (errno.EACCES, errno.EROFS, errno.ENOSPC))
EPERM, EDQUOT, E2BIG = (fault_words(e) for e in (errno.EPERM, errno.EDQUOT, errno.E2BIG))
ENOENT, ETIMEDOUT = fault_words(errno.ENOENT), fault_words(errno.ETIMEDOUT)
SKIPPED, ROLLED_BACK, FAILED = NodeState.SKIPPED, NodeState.ROLLED_BACK, NodeState.FAILED

CASES = [
    # Backup (the observed bug: a directory where the agent's drop-in goes) and the other non-files.
    Case("backup-directory", profiles.crio, DROP_IN, replace_with("directory", CRIO_DROPIN), SKIPPED,
         ("back up", CRIO_DROPIN, *EISDIR, "remove or rename")),
    Case("backup-fifo", profiles.crio, DROP_IN, replace_with("fifo", CRIO_DROPIN), SKIPPED,
         ("back up", CRIO_DROPIN, "a FIFO", *ENXIO, "remove or rename")),
    # ReadHost: reading and listing the host.
    Case("read-symlink-out", profiles.crio, DROP_IN, replace_with("symlink-out", CRIO_DROPIN), SKIPPED,
         ("read", CRIO_DROPIN, *ELOOP, "symbolic link")),
    Case("read-oversize", profiles.crio, DROP_IN, replace_with("oversize", CRIO_DROPIN), SKIPPED,
         ("read", CRIO_DROPIN, *EFBIG, "shrink")),
    Case("read-config-directory", profiles.kubeadm_no_config_dir, EDIT, replace_with("directory", CONFIG),
         SKIPPED, ("read", CONFIG, *EISDIR)),
    Case("read-config-symlink-out", profiles.kubeadm_no_config_dir, EDIT, replace_with("symlink-out", CONFIG),
         SKIPPED, ("read", CONFIG, *ELOOP)),
    Case("read-config-denied", profiles.kubeadm_no_config_dir, EDIT, _unreadable(CONFIG), SKIPPED,
         ("read", CONFIG, *EACCES, "SELinux")),
    Case("list-dir-symlink-out", profiles.crio, DROP_IN, replace_with("symlink-out", f"/{c.CRIO_DROPIN_DIR}"),
         SKIPPED, ("read", f"/{c.CRIO_DROPIN_DIR}", *ELOOP)),
    # Listings are capped in count and depth: past a cap the directory is named with the cap.
    Case("list-too-many", profiles.crio, DROP_IN, _many_files(f"/{c.CRIO_DROPIN_DIR}", MAX_LIST_ENTRIES + 1),
         SKIPPED, ("read", f"/{c.CRIO_DROPIN_DIR}", *E2BIG, f"more than {MAX_LIST_ENTRIES} entries",
                   "remove what does not belong")),
    Case("list-too-deep", profiles.kubeadm_containerd, DROP_IN,
         _deep_dirs(profiles.CONFIG_DIR, MAX_LIST_DEPTH + 1), SKIPPED,
         ("read", profiles.CONFIG_DIR, *E2BIG, f"more than {MAX_LIST_DEPTH} levels deep")),
    Case("find-kubelet-denied", profiles.crio, DROP_IN,
         _host_call("kubelet_process", PermissionError(errno.EACCES, "Permission denied", "/proc/1/cmdline")),
         SKIPPED, ("/proc/1/cmdline", *EACCES)),
    # The kubelet's /metrics (read before the first write for the gate as it was).
    Case("scrape-emfile", profiles.crio, DROP_IN,
         _host_call("kubelet_get", OSError(errno.EMFILE, os.strerror(errno.EMFILE))), SKIPPED,
         ("/metrics", "EMFILE", os.strerror(errno.EMFILE))),
    # SaveTransaction: the agent's own record, before the first write.
    Case("record-read-only", profiles.crio, DROP_IN, _read_only(STATE_DIR), SKIPPED,
         ("record the transaction", f"{STATE_DIR}/txn.json", *EROFS, "writable")),
    Case("record-full", profiles.crio, DROP_IN, _full(STATE_DIR), SKIPPED,
         ("record the transaction", *ENOSPC, "free space")),
    # WriteFiles after the transaction: restored, RolledBack.
    Case("write-denied", profiles.crio, DROP_IN, _denied(f"/{c.CRIO_DROPIN_DIR}"), ROLLED_BACK,
         ("write", CRIO_DROPIN, *EACCES, "rolled back")),
    Case("write-read-only", profiles.crio, DROP_IN, _read_only("/etc"), ROLLED_BACK,
         ("write", KUBELET_DROPIN, *EROFS, "rolled back")),
    # No file can be made or named in an immutable directory: the target named (seen on the lab's ext4
    # nodes: tests/lab/test_lab_hostfaults.py).
    Case("write-immutable-dir", profiles.kubeadm_containerd, DROP_IN, _immutable(profiles.CONFIG_DIR),
         ROLLED_BACK, (f"write {KUBELET_DROPIN} failed", *EPERM, "immutable", "rolled back")),
    # The drop-in directory on a filesystem of its own: that filesystem's refusal, never EXDEV (the new
    # file is made in the directory itself; assert_reported refuses EXDEV in every reason).
    Case("write-read-only-dropin-dir", profiles.kubeadm_containerd, DROP_IN, _read_only(profiles.CONFIG_DIR),
         ROLLED_BACK, (f"write {KUBELET_DROPIN} failed", *EROFS, "writable", "rolled back")),
    Case("write-full-dropin-dir", profiles.kubeadm_containerd, DROP_IN, _full(profiles.CONFIG_DIR),
         ROLLED_BACK, (f"write {KUBELET_DROPIN} failed", *ENOSPC, "free space", "rolled back")),
    Case("write-quota-dropin-dir", profiles.crio, DROP_IN, _over_quota(f"/{c.CRIO_DROPIN_DIR}"),
         ROLLED_BACK, (f"write {CRIO_DROPIN} failed", *EDQUOT, "quota", "rolled back")),
    Case("write-full", profiles.crio, DROP_IN, _full("/etc"), ROLLED_BACK,
         ("write", KUBELET_DROPIN, *ENOSPC, "rolled back")),
    Case("write-config-full", profiles.kubeadm_no_config_dir, EDIT, _full(CONFIG, times=1), ROLLED_BACK,
         ("write", CONFIG, *ENOSPC, "rolled back")),
    # Commands.
    Case("restart-hangs", profiles.crio, DROP_IN, _hangs("systemctl", "restart", "crio"), ROLLED_BACK,
         ("`systemctl restart crio`", *ETIMEDOUT, "hangs", "rolled back")),
    Case("restart-kubelet-hangs", profiles.kubeadm_containerd, DROP_IN,
         _hangs("systemctl", "restart", "kubelet"), ROLLED_BACK,
         ("`systemctl restart kubelet`", *ETIMEDOUT, "rolled back")),
    Case("systemctl-missing", profiles.crio, DROP_IN, _missing("systemctl"), FAILED,
         ("`systemctl restart crio`", *ENOENT, "install it", "ROLLBACK FAILED", "needs a human")),
    Case("unit-fails-to-restart", profiles.crio, DROP_IN, _restart_fails, FAILED,
         ("`systemctl restart crio` exited 1", "journalctl -xeu crio.service", "needs a human")),
    # The journal (read after the restart: the rollback needs it too).
    Case("journal-denied", profiles.crio, DROP_IN,
         _host_call("journal", PermissionError(errno.EACCES, "Permission denied", "/var/log/journal")),
         FAILED, ("journal", "/var/log/journal", *EACCES, "needs a human")),
]  # fmt: skip


@pytest.mark.parametrize("case", CASES, ids=[case.name for case in CASES])
def test_each_effect_and_fault_ends_in_one_precise_report(make_rig: RigFactory, case: Case) -> None:
    rig = make_rig(case.profile())
    case.setup(rig)
    before = tree(rig)

    rig.apply(mode=case.mode)

    reason = assert_reported(rig, case.state, *case.words)
    if case.state is SKIPPED:
        assert reason.endswith(f"then {RETRY}; nothing was changed on the node")
        assert not any(cmd[:2] == ("systemctl", "restart") for cmd in rig.host.commands)
        assert rig.api.event_reasons(NODE) == ["HostFault"]
    if case.state is ROLLED_BACK:
        assert reason.endswith(f"once fixed, {RETRY}")
        assert rig.host.node_ready()
    # The files come back even when the services do not (a restart cannot, or the journal cannot be read).
    assert tree(rig) == before
    assert protocol.ANN_CURRENT not in rig.annotations


def test_a_restore_that_fails_too_says_both_and_leaves_no_file_half_written(make_rig: RigFactory) -> None:
    """The disk fills once the --config edit is verified: keeping the original bytes fails, and so does
    writing them back; every file is old or new, never a part of either."""
    rig = make_rig(profiles.kubeadm_no_config_dir())
    original = rig.path(CONFIG).read_bytes()
    # The transaction and the edit are written and verified; then the disk is full.
    rig.host.faults.files.full.add("/")
    rig.host.faults.files.after = 4

    rig.apply(mode=EDIT)

    reason = assert_reported(rig, FAILED, *ENOSPC, "ROLLBACK FAILED", "restore", "needs a human")
    # ENOSPC while the new file is written in the config's own directory: the config named.
    assert f"restore {CONFIG} failed (ENOSPC" in reason
    assert "recording the halt failed too" in reason  # the agent's record is on the same full disk
    edited = rig.path(CONFIG).read_bytes()
    assert edited != original and b"EventedPLEG: true" in edited  # the new file whole, not a part
    assert not temp_files(rig)
    # Once there is room again, the next request restores the recorded transaction first; this one fails
    # verification and rolls back too: the node ends with the original bytes.
    rig.host.faults.files.full.clear()
    rig.host.faults.kubelet.fails_when_evented = True
    rig.apply(mode=EDIT)
    assert rig.state == NodeState.ROLLED_BACK
    assert rig.path(CONFIG).read_bytes() == original


# --- the after-Done check and the host check -----------------------------------------------------------


def test_a_fault_after_done_is_one_event_and_leaves_the_state(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.crio())
    rig.apply()
    assert rig.state == NodeState.DONE
    replace_with("symlink-out", CRIO_DROPIN)(rig)
    events = len(rig.api.events)

    rig.check()
    rig.check()

    assert rig.state == NodeState.DONE
    new = rig.api.events[events:]
    assert [e.reason for e in new] == ["HostFault"]
    assert CRIO_DROPIN in new[0].message and "ELOOP" in new[0].message


def test_the_host_check_publishes_a_fault_as_every_modes_refusal(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_no_config_dir())
    replace_with("directory", CONFIG)(rig)

    assert drive(rig.agent.host_check(), rig.clock.sleep)

    check = hostcheck.parse(rig.annotations[protocol.ANN_HOST_CHECK])
    assert check is not None
    assert set(check.refusals) == {m.value for m in KubeletConfigMode}
    for refusal in check.refusals.values():
        assert CONFIG in refusal and "EISDIR" in refusal and "Is a directory" in refusal


# --- property: any file fault anywhere the agent works ----------------------------------------------------

KINDS = ("directory", "fifo", "symlink-out", "oversize")
PLACES = (CRIO_DROPIN, KUBELET_DROPIN, f"/{c.CRIO_DROPIN_DIR}", profiles.CONFIG_DIR)
INJECTED = ("unreadable", "denied", "read_only", "full")
TOPS = ("/", "/etc", "/etc/crio", f"/{c.CRIO_DROPIN_DIR}", "/etc/kubernetes", profiles.CONFIG_DIR, STATE_DIR)


def _rig(root: Path, profile: HostProfile) -> Rig:
    clock = FakeClock()
    host = SimHost(root, profile, clock)
    api = FakeApi()
    api.add_node(NODE, profile.kubelet_version, profile.runtime, ready=host.node_ready)
    agent = Agent(NODE, host, api, AgentSettings(namespace=NAMESPACE), trace=[], files=host.files)
    return Rig(host, api, agent, clock)


def _check_invariants(rig: Rig, before: dict[str, Entry]) -> None:
    ends = endings(rig)
    assert len(ends) == 1, [(e.state, e.reason) for e in ends]
    assert not temp_files(rig)
    state = NodeState(rig.state)
    reason = rig.annotations[protocol.ANN_REASON]
    assert "\n" not in reason
    if state is NodeState.DONE:  # the fault touched nothing the agent needed
        return
    if "Unsupported" not in reason:  # a refusal is precise in its own words (tested elsewhere)
        named = [code for code in errno.errorcode.values() if f"({code}: " in reason]
        assert named, reason
        assert os.strerror(getattr(errno, named[0])) in reason
        assert reason.count("/") >= 1  # a host path or a command line
    if "ROLLBACK FAILED" not in reason:  # Skipped, RolledBack, or Failed with the files restored
        assert tree(rig) == before


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(KINDS),
    place=st.sampled_from(PLACES),
    mode=st.sampled_from((DROP_IN, EDIT)),
)
def test_property_a_misplaced_file_anywhere_ends_in_one_report_and_no_change(
    kind: str, place: str, mode: KubeletConfigMode
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rig = _rig(Path(tmp, "root"), profiles.crio())
        replace_with(kind, place)(rig)
        before = tree(rig)
        rig.apply(mode=mode)
        _check_invariants(rig, before)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fault=st.sampled_from(INJECTED),
    top=st.sampled_from(TOPS),
    after=st.integers(min_value=0, max_value=6),
    times=st.sampled_from((None, 1)),
)
def test_property_a_refusing_filesystem_anywhere_ends_in_one_report_and_no_half_file(
    fault: str, top: str, after: int, times: int | None
) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        rig = _rig(Path(tmp, "root"), profiles.crio())
        before = tree(rig)
        faults = rig.host.faults.files
        getattr(faults, fault).add(top)
        faults.after, faults.times = after, times
        rig.apply()
        _check_invariants(rig, before)


@pytest.mark.parametrize("kind", ["directory", "fifo"])
def test_the_host_check_refuses_what_the_backup_would_fail_on(make_rig: RigFactory, kind: str) -> None:
    """The observed bug's shape (a directory, or a FIFO, where the CRI-O drop-in goes) is refused by the host
    check, so the operator never cordons the node for it; the host is left as it was."""
    rig = make_rig(profiles.crio())
    replace_with(kind, CRIO_DROPIN)(rig)
    before = tree(rig)

    assert drive(rig.agent.host_check(), rig.clock.sleep)

    check = hostcheck.parse(rig.annotations[protocol.ANN_HOST_CHECK])
    assert check is not None
    for refusal in check.refusals.values():
        assert refusal.startswith(f"back up {CRIO_DROPIN} failed") and "remove or rename" in refusal, refusal
    assert tree(rig) == before
