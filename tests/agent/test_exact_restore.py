"""A rollback of a modified pre-existing file (kubeletConfig EditConfigFile) restores it exactly: bytes,
mode, owner and extended attributes, from the backup in memory and from the transaction recorded on the
host (after an interruption or onFailure=Halt). The simulated host's files are real files, so their owner,
mode and xattrs are real (the tests run as root)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from eventedpleg import constants as c
from eventedpleg.agent.hostfiles import HostFiles
from eventedpleg.agent.statestore import StateStore
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.core.node.blocks.transaction import FileCopy, Transaction
from eventedpleg.core.node.facts.hostplan import ManagedState
from eventedpleg.models.nodeconfig import KubeletConfigMode, OnFailure
from eventedpleg.protocol import NodeState
from eventedpleg_lab.sim import profiles
from eventedpleg_lab.sim.files import Attributes, attributes
from tests.agent.conftest import Rig, RigFactory

CONFIG = profiles.KUBEADM_CONFIG
EDIT = KubeletConfigMode.EDIT_CONFIG_FILE
XATTRS = {"user.eventedpleg.test": b"kept\x00exactly", "user.site.label": b"node-config"}


def dress(path: Path) -> None:
    """An owner, mode and xattrs unlike what the agent writes by default (0644 root:root, none)."""
    if os.geteuid() != 0:
        pytest.skip("changing a file's owner needs root")
    try:
        for name, value in XATTRS.items():
            os.setxattr(path, name, value)
    except OSError as exc:
        if exc.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            pytest.skip(f"the filesystem under {path.parent} refuses user.* extended attributes")
        raise
    os.chown(path, 1234, 2345)
    path.chmod(0o640)


def dressed_rig(make_rig: RigFactory) -> tuple[Rig, Attributes]:
    rig = make_rig(profiles.kubeadm_no_config_dir())
    dress(rig.path(CONFIG))
    before = attributes(rig.path(CONFIG))
    assert before.mode == 0o640 and (before.uid, before.gid) == (1234, 2345)
    assert dict(before.xattrs) == XATTRS
    return rig, before


def test_rollback_restores_bytes_mode_owner_and_xattrs(make_rig: RigFactory) -> None:
    rig, before = dressed_rig(make_rig)
    rig.host.faults.kubelet.fails_when_evented = True

    rig.apply(mode=EDIT)

    assert rig.state == NodeState.ROLLED_BACK
    assert attributes(rig.path(CONFIG)) == before


def test_the_edit_itself_keeps_mode_owner_and_xattrs(make_rig: RigFactory) -> None:
    rig, before = dressed_rig(make_rig)

    rig.apply(mode=EDIT)

    assert rig.state == NodeState.DONE
    after = attributes(rig.path(CONFIG))
    assert after.content != before.content and b"EventedPLEG: true" in after.content
    assert (after.mode, after.uid, after.gid, after.xattrs) == (
        before.mode,
        before.uid,
        before.gid,
        before.xattrs,
    )


def test_the_recorded_transaction_restores_them_too(make_rig: RigFactory) -> None:
    """onFailure=Halt leaves the edit; the next request restores from the transaction on the host first."""
    rig, before = dressed_rig(make_rig)
    rig.host.faults.kubelet.fails_when_evented = True
    rig.apply(mode=EDIT, options=AgentOptions(on_failure=OnFailure.HALT))
    assert rig.state == NodeState.FAILED
    assert attributes(rig.path(CONFIG)).content != before.content  # left as it failed

    rig.host.faults.kubelet.fails_when_evented = False
    rig.apply(enabled=False, mode=EDIT)

    assert rig.state == NodeState.DONE
    assert attributes(rig.path(CONFIG)) == before


def symlinked_config(rig: Rig) -> tuple[Path, str, bytes]:
    """The kubelet --config as a symbolic link to the file the site manages (as some images ship it)."""
    config = rig.path(CONFIG)
    real = rig.path("/etc/kubernetes/kubelet-config.yaml")
    real.parent.mkdir(parents=True, exist_ok=True)
    real.write_bytes(config.read_bytes())
    config.unlink()
    link = "../../../etc/kubernetes/kubelet-config.yaml"  # relative: the simulated kubelet reads it too
    config.symlink_to(link)
    return config, link, real.read_bytes()


def test_a_symlinked_config_is_a_link_again_after_a_rollback(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_no_config_dir())
    config, target, content = symlinked_config(rig)
    rig.host.faults.kubelet.fails_when_evented = True

    rig.apply(mode=EDIT)

    assert rig.state == NodeState.ROLLED_BACK
    assert config.is_symlink() and str(config.readlink()) == target
    assert rig.path("/etc/kubernetes/kubelet-config.yaml").read_bytes() == content


def test_a_symlinked_config_is_a_link_again_from_the_recorded_transaction(make_rig: RigFactory) -> None:
    rig = make_rig(profiles.kubeadm_no_config_dir())
    config, target, content = symlinked_config(rig)
    rig.host.faults.kubelet.fails_when_evented = True
    rig.apply(mode=EDIT, options=AgentOptions(on_failure=OnFailure.HALT))
    assert rig.state == NodeState.FAILED and not config.is_symlink()  # left as it failed

    rig.host.faults.kubelet.fails_when_evented = False
    rig.apply(enabled=False, mode=EDIT)

    assert rig.state == NodeState.DONE
    assert config.is_symlink() and str(config.readlink()) == target
    assert rig.path("/etc/kubernetes/kubelet-config.yaml").read_bytes() == content


def test_a_large_config_backup_is_a_file_of_its_own_and_restores_after_a_halt(make_rig: RigFactory) -> None:
    """A --config of 3.5 MiB (under the read cap): its backup is one file, so the transaction record stays
    small and readable (inline base64 would have been 4.7 MiB, over the cap), and restores it exactly."""
    rig = make_rig(profiles.kubeadm_no_config_dir())
    config = rig.path(CONFIG)
    config.write_bytes(config.read_bytes() + b"# " + b"x" * (7 << 19) + b"\n")
    before = config.read_bytes()
    rig.host.faults.kubelet.fails_when_evented = True
    rig.apply(mode=EDIT, options=AgentOptions(on_failure=OnFailure.HALT))
    assert rig.state == NodeState.FAILED
    state = rig.path(f"/{c.AGENT_STATE_DIR}")
    assert (state / "txn.json").stat().st_size < 16 << 10
    assert (state / "backup-0").read_bytes() == before

    rig.host.faults.kubelet.fails_when_evented = False
    rig.apply(enabled=False, mode=EDIT)

    assert rig.state == NodeState.DONE
    assert config.read_bytes() == before
    assert not (state / "txn.json").exists() and not (state / "backup-0").exists()


def test_a_backup_that_does_not_match_its_record_is_a_fault_not_a_restore(tmp_path: Path) -> None:
    files = HostFiles(tmp_path)
    store = StateStore(files)
    txn = Transaction("h", True, "", (("/etc/x.conf", FileCopy(b"old\n", 0o644)),), False, "", ManagedState())
    store.begin(txn)
    assert store.transaction() == txn
    (tmp_path / c.AGENT_STATE_DIR / "backup-0").write_bytes(b"tampered\n")
    with pytest.raises(OSError, match="does not match") as refused:
        store.transaction()
    assert refused.value.errno == errno.EIO
    store.end()
    assert sorted(p.name for p in (tmp_path / c.AGENT_STATE_DIR).iterdir()) == []
