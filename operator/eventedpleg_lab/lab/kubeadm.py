"""kubeadm-joined lab nodes: the control plane gets what `kubeadm init` leaves for joining nodes, made by the
real kubeadm (`kubeadm init phase bootstrap-token` and `upload-config`, run on the host against the lab's
apiserver), and a node joins with the real `kubeadm join` inside its nspawn machine.

What `kubeadm init phase bootstrap-token` creates (KK/cmd/kubeadm/app/cmd/phases/init/bootstraptoken.go at
v1.36.4): the bootstrap token Secret in kube-system; ClusterRoleBindings giving the group
system:bootstrappers:kubeadm:default-node-token system:node-bootstrapper (kubeadm:kubelet-bootstrap),
kubeadm:get-nodes and the CSR auto-approval for nodeclient (kubeadm:node-autoapprove-bootstrap), and
system:nodes selfnodeclient (kubeadm:node-autoapprove-certificate-rotation); the cluster-info ConfigMap in
kube-public (server and CA of the --kubeconfig given) and its Role for system:anonymous. The JWS signature in
cluster-info (`jws-kubeconfig-<token id>`) is added by kube-controller-manager's bootstrapsigner controller,
which the lab turns on (it is off by default, as is tokencleaner; csrapproving and csrsigning are on).
`upload-config kubeadm` writes kube-system/kubeadm-config (ClusterConfiguration) and its Role for the
bootstrap group and system:nodes; `upload-config kubelet` writes kube-system/kubelet-config and its Role.

The pure part (the configuration texts, the CA hash) is separate from the two runners at the bottom.
"""

from __future__ import annotations

import hashlib
import secrets
import string
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from eventedpleg_lab.lab.nodefiles import JOIN_CONFIG
from eventedpleg_lab.lab.nodes import GATEWAY, NodeSpec
from eventedpleg_lab.realnode.config import kubelet_base

K8S_VERSION = "v1.36.4"  # build.KUBEADM_136's version, the lab kubelet's too
CONTAINERD_SOCKET = "unix:///run/containerd/containerd.sock"
SERVICE_SUBNET = "10.0.0.0/24"  # the local control plane's --service-cluster-ip-range
POD_SUBNET = "10.244.0.0/16"
NODE_BOOTSTRAP_GROUP = "system:bootstrappers:kubeadm:default-node-token"
# Feature gates the cluster's kubelet-config ConfigMap sets, as a platform team would cluster-wide: the
# agent must keep them (they are in config.yaml; ours go to a drop-in) and leave them on revert.
# Both are Beta gates of kubelet 1.36 (KK/pkg/features/kube_features.go at v1.36.4); ContainerCheckpoint is
# turned off (default on: only the kubelet's checkpoint API goes), so the running kubelet shows theirs.
SITE_FEATURE_GATES = {"ContainerCheckpoint": False, "GracefulNodeShutdown": True}

# The one preflight check kubeadm join cannot pass in an nspawn machine on this host (the name
# `--ignore-preflight-errors` takes, KK/cmd/kubeadm/app/preflight/checks.go), with why. Measured on the lab:
# every other check passes or only warns (ContainerRuntimeVersion on containerd 1.7: no RuntimeConfig CRI
# method; Hostname: the node names do not resolve here).
IGNORED_PREFLIGHT = {
    # "cgroups v1 support is deprecated ... you must set the kubelet configuration option 'FailCgroupV1' to
    # 'false'. You must also explicitly skip this validation": this host is cgroup v1; the kubelet-config
    # ConfigMap below sets failCgroupV1: false.
    "SystemVerification": "cgroup v1 host (the kubelet runs on it with failCgroupV1: false)",
}


@dataclass(frozen=True)
class Bootstrap:
    """What a node needs to join: the API endpoint, a bootstrap token and the CA's public-key hash."""

    endpoint: str  # host:port
    token: str
    ca_cert_hash: str  # sha256:<hex>


def new_token() -> str:
    """A bootstrap token `[a-z0-9]{6}.[a-z0-9]{16}` (cluster-bootstrap token/api BootstrapTokenPattern)."""
    alphabet = string.ascii_lowercase + string.digits
    return (
        "".join(secrets.choice(alphabet) for _ in range(6))
        + "."
        + "".join(secrets.choice(alphabet) for _ in range(16))
    )


def ca_cert_hash(ca_pem: bytes) -> str:
    """`--discovery-token-ca-cert-hash`: sha256 of the CA certificate's DER SubjectPublicKeyInfo
    (KK/cmd/kubeadm/app/util/pubkeypin/pubkeypin.go)."""
    spki = (
        x509.load_pem_x509_certificate(ca_pem)
        .public_key()
        .public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return "sha256:" + hashlib.sha256(spki).hexdigest()


def kubelet_configuration() -> dict[str, Any]:
    """The cluster's KubeletConfiguration (goes to kube-system/kubelet-config; kubeadm adds its defaults:
    webhook authn/authz, clientCAFile /etc/kubernetes/pki/ca.crt, rotateCertificates, staticPodPath ...).
    What this machine needs (realnode.config.kubelet_base) minus the CRI socket, which kubeadm 1.36 writes
    per node into /var/lib/kubelet/instance-config.yaml (NodeLocalCRISocket)."""
    doc = {
        k: v
        for k, v in kubelet_base(CONTAINERD_SOCKET, max_pods=110).items()
        if k != "containerRuntimeEndpoint"
    }
    doc.pop("resolvConf", None)  # kubeadm decides it (systemd-resolved is masked on the nodes)
    doc["featureGates"] = dict(SITE_FEATURE_GATES)
    return doc


def init_config(api_port: int, token: str) -> str:
    """The `--config` of the `kubeadm init phase` commands the lab runs on the host."""
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "kubeadm.k8s.io/v1beta4",
            "kind": "InitConfiguration",
            "bootstrapTokens": [
                {
                    "token": token,
                    "description": "eventedpleg lab: kubeadm join",
                    "ttl": "24h0m0s",
                    "usages": ["signing", "authentication"],
                    "groups": [NODE_BOOTSTRAP_GROUP],
                }
            ],
            "localAPIEndpoint": {"advertiseAddress": GATEWAY, "bindPort": api_port},
            # Given, so kubeadm does not look for a runtime on the host (none runs there).
            "nodeRegistration": {"name": "lab-control-plane", "criSocket": CONTAINERD_SOCKET},
        },
        {
            "apiVersion": "kubeadm.k8s.io/v1beta4",
            "kind": "ClusterConfiguration",
            "clusterName": "lab",
            "kubernetesVersion": K8S_VERSION,  # given: kubeadm would otherwise ask dl.k8s.io
            "controlPlaneEndpoint": f"{GATEWAY}:{api_port}",
            "networking": {"serviceSubnet": SERVICE_SUBNET, "podSubnet": POD_SUBNET},
        },
        kubelet_configuration(),
    ]
    return yaml.safe_dump_all(docs, sort_keys=False)


def join_config(spec: NodeSpec, boot: Bootstrap) -> str:
    """The node's `kubeadm join --config`: token discovery pinned to the CA's hash, the node's address (this
    host's nodes have one interface, but the kubelet would otherwise take it from a hostname lookup),
    and the preflight checks that cannot pass here (IGNORED_PREFLIGHT)."""
    doc = {
        "apiVersion": "kubeadm.k8s.io/v1beta4",
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": boot.endpoint,
                "token": boot.token,
                "caCertHashes": [boot.ca_cert_hash],
            }
        },
        "nodeRegistration": {
            "name": spec.name,
            "criSocket": CONTAINERD_SOCKET,
            "kubeletExtraArgs": [{"name": "node-ip", "value": spec.ip}],
            "ignorePreflightErrors": sorted(IGNORED_PREFLIGHT),
        },
    }
    return yaml.safe_dump(doc, sort_keys=False)


def admin_kubeconfig(api_port: int, ca_pem: bytes, cert_pem: bytes, key_pem: bytes) -> str:
    """The lab admin's credentials with the server on the bridge: `kubeadm init phase bootstrap-token` copies
    this server and CA into cluster-info, which the nodes then use."""
    import base64  # noqa: PLC0415

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "lab",
                "cluster": {
                    "server": f"https://{GATEWAY}:{api_port}",
                    "certificate-authority-data": b64(ca_pem),
                },
            }
        ],
        "users": [
            {
                "name": "admin",
                "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
            }
        ],
        "contexts": [{"name": "admin", "context": {"cluster": "lab", "user": "admin"}}],
        "current-context": "admin",
    }
    return yaml.safe_dump(doc, sort_keys=False)


# --- the two runners ---------------------------------------------------------------------------------------

INIT_PHASES = (("bootstrap-token",), ("upload-config", "kubeadm"), ("upload-config", "kubelet"))


class KubeadmError(RuntimeError):
    pass


def prepare_control_plane(
    kubeadm: Path,
    directory: Path,
    *,
    api_port: int,
    ca_crt: Path,
    admin_crt: Path,
    admin_key: Path,
    log: Callable[[str], None],
    signed: Callable[[str], bool],
    timeout: float = 60.0,
) -> Bootstrap:
    """Run the `kubeadm init` phases that make the cluster joinable, then wait until the bootstrapsigner has
    signed cluster-info for the token (`signed(token_id)`). Everything kubeadm printed goes to
    directory/kubeadm-init.log."""
    directory.mkdir(parents=True, exist_ok=True)
    token = new_token()
    config = directory / "init.yaml"
    kubeconfig = directory / "admin.conf"
    config.write_text(init_config(api_port, token))
    kubeconfig.write_text(
        admin_kubeconfig(api_port, ca_crt.read_bytes(), admin_crt.read_bytes(), admin_key.read_bytes())
    )
    kubeconfig.chmod(0o600)
    logfile = directory / "kubeadm-init.log"
    for phase in INIT_PHASES:
        argv = [
            str(kubeadm),
            "init",
            "phase",
            *phase,
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            "--v=1",
        ]
        done = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
        with logfile.open("a") as out:
            out.write(f"$ {' '.join(argv)}\n{done.stdout}{done.stderr}\n")
        if done.returncode != 0:
            raise KubeadmError(f"kubeadm init phase {' '.join(phase)}: {(done.stderr or done.stdout)[-800:]}")
        log(f"[lab] kubeadm init phase {' '.join(phase)}: done")
    token_id = token.split(".")[0]
    deadline = time.monotonic() + timeout
    while not signed(token_id):
        if time.monotonic() > deadline:
            raise KubeadmError(
                f"cluster-info has no jws-kubeconfig-{token_id} after {timeout:.0f}s (bootstrapsigner)"
            )
        time.sleep(1)
    return Bootstrap(f"{GATEWAY}:{api_port}", token, ca_cert_hash(ca_crt.read_bytes()))


def join_argv() -> list[str]:
    return ["kubeadm", "join", f"--config={JOIN_CONFIG}", "--v=1"]
