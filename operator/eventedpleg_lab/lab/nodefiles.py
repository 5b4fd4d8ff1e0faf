"""The files written into a node's root filesystem before it boots (pure: text in, text out).

systemd is the node's PID 1; the runtime and the kubelet are ordinary units, as on a kubeadm node, so the
agent's `nsenter -t 1 systemctl restart kubelet` and `journalctl -u kubelet` are the real thing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import yaml

from eventedpleg_lab.lab.nodes import GATEWAY, MAX_NODES, REGISTRY, LabRuntime, NodeSpec
from eventedpleg_lab.realnode.config import kubelet_base
from eventedpleg_lab.realnode.images import IDLE_IMAGE, PAUSE_IMAGE
from eventedpleg_lab.sim import profiles

BUSYBOX_IMAGE = "example.local/busybox:1"
# The archive names the lab copies into /opt/lab/images, and the reference each is stored under.
IMAGE_REFS = {"pause": PAUSE_IMAGE, "idle": IDLE_IMAGE, "busybox": BUSYBOX_IMAGE}
IMAGE_DIR = "/opt/lab/images"
SERVICE_IP = "10.0.0.1"  # the `kubernetes` Service; no kube-proxy here, each node DNATs it (see below)
PKI_DIR = "/etc/kubernetes/pki"
KUBELET_KUBECONFIG = "/etc/kubernetes/kubelet.kubeconfig"
JOIN_CONFIG = "/root/kubeadm-join.yaml"  # a kubeadm node's `kubeadm join --config`
CRIO_ADMIN_DROPIN = "/etc/crio/crio.conf.d/99-zz-site-policy.conf"


@dataclass(frozen=True)
class NodeFile:
    text: str
    mode: int = 0o644


ENTRYPOINT = """\
#!/bin/sh
# PID 1 of the node before systemd: nspawn mounts the cgroup v1 controllers read-only; the kubelet and the
# runtime need them writable, and systemd checks that once, at start.
for c in /sys/fs/cgroup/*; do mount -o remount,bind,rw "$c" 2>/dev/null; done
exec /lib/systemd/systemd
"""

# CRI-O sets the sandbox's oom_score_adj to -998; runc cannot lower it without CAP_SYS_RESOURCE, which this
# machine withholds (docs/realnode.md). containerd has restrict_oom_score_adj for that; CRI-O has no
# such option, so its runtime is this wrapper, which clamps the value to 0 in the bundle's config.json.
# It also drops CRI-O's hugepage limits: this machine has no v1 hugetlb controller, and runc would fail
# "cannot set hugetlb limit" (containerd leaves them out when the controller is missing). And for a
# privileged container CRI-O asks for every capability; without CAP_SYS_RESOURCE in the bounding set runc
# fails "unable to apply caps" (containerd grants a privileged container only what it holds itself).
RUNC_WRAPPER = """\
#!/bin/sh
b=""; prev=""
for a in "$@"; do
  case "$a" in --bundle=*) b="${a#--bundle=}";; esac
  if [ "$prev" = "--bundle" ] || [ "$prev" = "-b" ]; then b="$a"; fi
  prev="$a"
done
if [ -n "$b" ] && [ -f "$b/config.json" ]; then
  # the whole (indented) file in one pattern space, so a list spanning lines matches
  sed -i -e ':a;N;$!ba' -e 's/"oomScoreAdj": *-[0-9]*/"oomScoreAdj": 0/' \
    -e 's/"hugepageLimits": *\\[[^]]*\\]/"hugepageLimits": []/' "$b/config.json"
  bnd=$(sed -n 's/^CapBnd:[[:space:]]*//p' /proc/self/status)
  if [ $(( 0x$bnd >> 24 & 1 )) -eq 0 ]; then  # 24 = CAP_SYS_RESOURCE
    sed -i -e ':a;N;$!ba' -e 's/"CAP_SYS_RESOURCE",[[:space:]]*//g' \\
      -e 's/,[[:space:]]*"CAP_SYS_RESOURCE"//g' -e 's/"CAP_SYS_RESOURCE"//g' "$b/config.json"
  fi
fi
exec /usr/sbin/runc "$@"
"""


def runtime_socket(spec: NodeSpec) -> str:
    if spec.runtime.is_crio:
        return "unix:///var/run/crio/crio.sock"
    return "unix:///run/containerd/containerd.sock"


def kubelet_config(spec: NodeSpec) -> str:
    doc = {
        **kubelet_base(runtime_socket(spec), max_pods=110),
        "podCIDR": spec.pod_subnet,
        # As on a kubeadm node: the apiserver and the agent (ServiceAccount token, nodes/metrics) are
        # authenticated and authorized; no anonymous access, no read-only port.
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": f"{PKI_DIR}/ca.crt"},
        },
        "authorization": {"mode": "Webhook"},
    }
    return "# Written by eventedpleg lab.\n" + yaml.safe_dump(doc, sort_keys=True)


def kubelet_kubeconfig(api_port: int) -> str:
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": "lab",
                "cluster": {
                    "server": f"https://{GATEWAY}:{api_port}",
                    "certificate-authority": f"{PKI_DIR}/ca.crt",
                    # The apiserver's serving cert names 127.0.0.1 and kubernetes.*, not the bridge address.
                    "tls-server-name": "kubernetes",
                },
            }
        ],
        "users": [
            {
                "name": "node",
                "user": {
                    "client-certificate": f"{PKI_DIR}/kubelet.crt",
                    "client-key": f"{PKI_DIR}/kubelet.key",
                },
            }
        ],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "node"}}],
        "current-context": "lab",
    }
    return yaml.safe_dump(doc, sort_keys=False)


def cni_config(spec: NodeSpec) -> str:
    doc = {
        "cniVersion": "1.0.0",
        "name": "lab",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": spec.pod_subnet, "gateway": spec.pod_gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(doc, indent=2) + "\n"


def net_unit(spec: NodeSpec, others: tuple[NodeSpec, ...]) -> str:
    routes = "".join(
        f"ExecStart=/sbin/ip route add {o.pod_subnet} via {o.ip}\n" for o in others if o.name != spec.name
    )
    return f"""\
[Unit]
Description=lab node network (address, routes to the other nodes' pod subnets)
Before=containerd.service crio.service kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/sbin/ip link set host0 up
ExecStart=/sbin/ip addr add {spec.ip}/24 dev host0
ExecStart=/sbin/ip route add default via {GATEWAY}
{routes}ExecStart=/sbin/sysctl -w net.ipv4.ip_forward=1
ExecStart=/usr/sbin/nft -f /etc/lab/kubernetes-service.nft

[Install]
WantedBy=multi-user.target
"""


def service_nat(api_port: int) -> str:
    """There is no kube-proxy: pods reach the `kubernetes` Service (what in-cluster config uses) through
    this DNAT to the apiserver on the bridge, in the node's own network namespace."""
    rule = f"ip daddr {SERVICE_IP} tcp dport 443 dnat to {GATEWAY}:{api_port}"
    return f"""\
table ip lab {{
  chain out {{ type nat hook output priority -100; {rule}; }}
  chain pre {{ type nat hook prerouting priority -100; {rule}; }}
}}
"""


def kubelet_unit(spec: NodeSpec) -> str:
    runtime_unit = "crio.service" if spec.runtime.is_crio else "containerd.service"
    return f"""\
[Unit]
Description=kubelet
Wants={runtime_unit}
After=lab-net.service {runtime_unit}

[Service]
ExecStart=/usr/local/bin/kubelet --config=/etc/kubernetes/kubelet.yaml \\
  --config-dir=/etc/kubernetes/kubelet.conf.d --kubeconfig={KUBELET_KUBECONFIG} --node-ip={spec.ip} --v=4
Restart=always
RestartSec=2
Delegate=yes

[Install]
WantedBy=multi-user.target
"""


# A kubeadm node's kubelet is where the Debian packages put it; the lab's own nodes run /usr/local/bin's.
KUBEADM_KUBELET = "/usr/bin/kubelet"
KUBEADM_BIN = "/usr/bin/kubeadm"


def kubeadm_package_files() -> dict[str, str]:
    """kubelet.service, 10-kubeadm.conf and /etc/default/kubelet exactly as the kubelet and kubeadm Debian
    packages of pkgs.k8s.io install them: the simulated kubeadm host's text (sim/profiles.py
    kubeadm_default, docs/compatibility.md §3), one source for both."""
    return profiles.package_files(profiles.kubeadm_default())


# Pulling from the lab's registry, as a cluster administrator points nodes at a private registry:
# containerd reads <config_path>/<host:port>/hosts.toml (containerd docs/hosts.md; `config_path` since 1.5,
# in the CRI images plugin in config version 3); CRI-O reads containers-registries.conf.d(5) drop-ins.
# The registry speaks plain HTTP on the bridge, so both are told so.
CONTAINERD_CERTS_D = "/etc/containerd/certs.d"
CONTAINERD_HOSTS_TOML = f"""\
server = "http://{REGISTRY}"
[host."http://{REGISTRY}"]
  capabilities = ["pull", "resolve"]
"""
CRIO_REGISTRY_CONF = f"""\
[[registry]]
location = "{REGISTRY}"
insecure = true
"""


def containerd_config(spec: NodeSpec) -> str:
    if spec.runtime is LabRuntime.CONTAINERD_22:
        return f"""\
version = 3
[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = '{PAUSE_IMAGE}'
[plugins.'io.containerd.cri.v1.runtime']
  restrict_oom_score_adj = true   # no CAP_SYS_RESOURCE here (docs/realnode.md)
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
    runtime_type = 'io.containerd.runc.v2'
  [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
    SystemdCgroup = false
    BinaryName = "/usr/sbin/runc"
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ['/usr/lib/cni']
    conf_dir = '/etc/cni/net.d'
[plugins.'io.containerd.cri.v1.images'.registry]
  config_path = '{CONTAINERD_CERTS_D}'
"""
    return f"""\
version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        BinaryName = "/usr/sbin/runc"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "/etc/cni/net.d"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{CONTAINERD_CERTS_D}"
"""


def containerd_unit(spec: NodeSpec) -> str:
    # Built from Go modules into /usr/local/bin (2.2, 1.7); Debian's 1.6 in /usr/bin. The unit's PATH puts
    # /usr/local/bin first, so the matching shim and ctr are found.
    binary = (
        "/usr/bin/containerd" if spec.runtime is LabRuntime.CONTAINERD_16 else "/usr/local/bin/containerd"
    )
    # $$ is systemd's escape for $.
    imports = f'for i in {IMAGE_DIR}/*.tar; do ctr -n k8s.io images import "$$i" || exit 1; done'
    return f"""\
[Unit]
Description=containerd
After=lab-net.service

[Service]
ExecStart={binary} --config /etc/containerd/config.toml
ExecStartPost=/bin/sh -c '{imports}'
Type=notify
Delegate=yes
KillMode=process
Restart=always
LimitNOFILE=infinity

[Install]
WantedBy=multi-user.target
"""


CRIO_CONFIG = f"""\
# Written by eventedpleg lab: the node's own CRI-O configuration (the agent adds its drop-in in crio.conf.d).
[crio]
storage_driver = "overlay"
[crio.runtime]
cgroup_manager = "cgroupfs"
conmon = "/usr/bin/conmon"
conmon_cgroup = "pod"
default_runtime = "runc"
pinns_path = "/usr/local/bin/pinns"
[crio.runtime.runtimes.runc]
runtime_path = "/usr/local/bin/runc-lab"
runtime_root = "/run/runc"
[crio.image]
pause_image = "{PAUSE_IMAGE}"
pause_command = ""   # the pause image's own entrypoint (busybox sleep inf)
[crio.network]
network_dir = "/etc/cni/net.d"
plugin_dirs = ["/usr/lib/cni"]
"""

CRIO_ADMIN_POLICY = """\
# The site's own policy, sorted after every other drop-in: no pod events from CRI-O.
[crio.runtime]
enable_pod_events = false
"""

STORAGE_CONF = """\
[storage]
driver = "overlay"
runroot = "/run/containers/storage"
graphroot = "/var/lib/containers/storage"
"""


def crio_unit() -> str:
    copies = " ".join(
        f"skopeo copy -q oci-archive:{IMAGE_DIR}/{name}.tar containers-storage:{ref} || exit 1;"
        for name, ref in IMAGE_REFS.items()
    )
    return f"""\
[Unit]
Description=CRI-O
After=lab-net.service

[Service]
ExecStart=/usr/local/bin/crio
ExecStartPost=/bin/sh -c "{copies}"
Type=notify
Delegate=yes
KillMode=process
Restart=always
LimitNOFILE=infinity

[Install]
WantedBy=multi-user.target
"""


# Units a node does not need (networking is lab-net's; no timers that wake the disk).
MASKED = (
    "systemd-networkd.service",
    "systemd-resolved.service",
    "systemd-timesyncd.service",
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "e2scrub_all.timer",
    "fstrim.timer",
)


def node_files(
    spec: NodeSpec,
    nodes: tuple[NodeSpec, ...],
    *,
    api_port: int,
    machine_id: str,
    join_config: str | None = None,
) -> dict[str, NodeFile]:
    """Node path -> file. Symlinks (unit enablement, masks) are in `node_links`. A kubeadm node gets the
    packages' kubelet unit files and `join_config` (kubeadm join writes the rest); the others the lab's
    own kubelet unit, configuration and credentials."""
    assert len(nodes) <= MAX_NODES
    files = {
        "/etc/hostname": NodeFile(spec.name + "\n"),
        "/etc/machine-id": NodeFile(machine_id + "\n"),
        "/usr/local/bin/lab-entrypoint": NodeFile(ENTRYPOINT, 0o755),
        "/etc/cni/net.d/10-lab.conflist": NodeFile(cni_config(spec)),
        "/etc/lab/kubernetes-service.nft": NodeFile(service_nat(api_port)),
        "/etc/systemd/system/lab-net.service": NodeFile(net_unit(spec, nodes)),
    }
    if spec.kubeadm:
        if join_config is None:
            raise ValueError(f"{spec.name}: a kubeadm node needs its join configuration")
        files.update({path: NodeFile(text) for path, text in kubeadm_package_files().items()})
        files[JOIN_CONFIG] = NodeFile(join_config, 0o600)
    else:
        files["/etc/kubernetes/kubelet.yaml"] = NodeFile(kubelet_config(spec))
        files[KUBELET_KUBECONFIG] = NodeFile(kubelet_kubeconfig(api_port), 0o600)
        files["/etc/systemd/system/kubelet.service"] = NodeFile(kubelet_unit(spec))
    if spec.runtime.is_crio:
        files["/etc/crio/crio.conf"] = NodeFile(CRIO_CONFIG)
        files["/etc/containers/storage.conf"] = NodeFile(STORAGE_CONF)
        files["/etc/systemd/system/crio.service"] = NodeFile(crio_unit())
        files["/usr/local/bin/runc-lab"] = NodeFile(RUNC_WRAPPER, 0o755)
        files["/etc/containers/registries.conf.d/50-lab-registry.conf"] = NodeFile(CRIO_REGISTRY_CONF)
        if spec.admin_pod_events_off:
            files[CRIO_ADMIN_DROPIN] = NodeFile(CRIO_ADMIN_POLICY)
    else:
        files["/etc/containerd/config.toml"] = NodeFile(containerd_config(spec))
        files[f"{CONTAINERD_CERTS_D}/{REGISTRY}/hosts.toml"] = NodeFile(CONTAINERD_HOSTS_TOML)
        files["/etc/systemd/system/containerd.service"] = NodeFile(containerd_unit(spec))
    return files


def node_links(spec: NodeSpec) -> dict[str, str]:
    """Node path -> symlink target: enabled units, masked units."""
    wants = "/etc/systemd/system/multi-user.target.wants"
    runtime_unit = "crio.service" if spec.runtime.is_crio else "containerd.service"
    links = {
        f"{wants}/{u}": f"/etc/systemd/system/{u}"
        for u in ("lab-net.service", "kubelet.service", runtime_unit)
    }
    if spec.kubeadm:  # the kubelet package's postinst: `systemctl enable kubelet` (its unit is in /usr/lib)
        links[f"{wants}/kubelet.service"] = profiles.KUBELET_UNIT
    masked = (*MASKED, "containerd.service") if spec.runtime.is_crio else MASKED
    links.update({f"/etc/systemd/system/{u}": "/dev/null" for u in masked})
    return links
