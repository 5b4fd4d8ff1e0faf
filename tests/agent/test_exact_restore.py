"""A rollback of a modified pre-existing file (kubeletConfig EditConfigFile) restores it exactly: bytes,
mode, owner and extended attributes, from the backup in memory and from the transaction recorded on the
host (after an interruption or onFailure=Halt). The simulated host's files are real files, so their owner,
mode and xattrs are real (the tests run as root)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from eventedpleg.constants import NodeState
from eventedpleg.core.agentoptions import AgentOptions
from eventedpleg.models.nodeconfig import KubeletConfigMode, OnFailure
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
