"""The lab's node set and the files written into a node (pure parts of eventedpleg_lab.lab)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tomllib
from pathlib import Path

import pytest
import yaml

from eventedpleg import protocol
from eventedpleg.core import compat
from eventedpleg_lab.lab import assets, chart, kubeadm
from eventedpleg_lab.lab import nodefiles as nf
from eventedpleg_lab.lab.nodes import DEFAULT_SPEC, REGISTRY, LabRuntime, SpecError, parse
from eventedpleg_lab.localcluster import pki
from eventedpleg_lab.sim import profiles


def test_default_node_set_covers_the_issue_cases() -> None:
    specs = parse(DEFAULT_SPEC)
    cases = {(s.kubelet, s.runtime, s.admin_pod_events_off, s.kubeadm) for s in specs}
    assert cases == {
        ("1.36", LabRuntime.CONTAINERD_22, False, False),
        ("1.36", LabRuntime.CRIO_136, False, False),
        ("1.37", LabRuntime.CONTAINERD_22, False, False),
        ("1.36", LabRuntime.CONTAINERD_16, False, False),
        ("1.36", LabRuntime.CRIO_134, True, False),
        ("1.36", LabRuntime.CONTAINERD_22, False, True),
        ("1.36", LabRuntime.CONTAINERD_17, False, True),
    }
    assert [s.index for s in specs] == [1, 2, 3, 4, 5, 6, 7]
    assert len({s.ip for s in specs}) == len({s.pod_subnet for s in specs}) == 7
    assert specs[0].ip == "172.16.77.11" and specs[0].pod_subnet == "10.244.1.0/24"
    assert parse(",".join(s.to_text() for s in specs)) == specs


def test_the_lab_expects_of_each_default_node_what_the_matrix_says() -> None:
    """lab-crio (CRI-O v1.36.3) is Supported and Done; lab-crio-off (v1.34.0 under kubelet 1.36) is Risky
    for cri-o#9663 and skipped from its Node object, as chart.expected_outcome says."""
    kubelets = {"1.36": "v1.36.4", "1.37": "v1.37.2"}
    runtimes = {
        LabRuntime.CONTAINERD_22: "containerd://2.2.9",
        LabRuntime.CONTAINERD_17: "containerd://1.7.35",
        LabRuntime.CONTAINERD_16: "containerd://1.6.20",
        **{rt: f"cri-o://{v.lstrip('v')}" for rt, v in assets.CRIO_VERSIONS.items()},
    }
    assert set(runtimes) == set(LabRuntime)
    levels = {}
    for spec in parse(DEFAULT_SPEC):
        found = compat.verdict(
            compat.NodeFacts(spec.name, kubelets[spec.kubelet], runtimes[spec.runtime]), compat.Policy()
        )
        levels[spec.name] = found.level
        want = chart.expected_outcome(spec)
        if found.level is compat.Level.SUPPORTED:  # taken; only the agent's host check may refuse it
            assert want.state in (protocol.NodeState.DONE.value, protocol.NodeState.SKIPPED.value), spec.name
            assert (want.state == protocol.NodeState.SKIPPED.value) is spec.admin_pod_events_off, spec.name
        else:  # skipped from the Node object, with the matrix's reason
            assert want.state == protocol.NodeState.SKIPPED.value, spec.name
            assert want.reason_has in found.summary, (spec.name, found.summary)
    assert levels["lab-crio"] is compat.Level.SUPPORTED
    assert levels["lab-crio-off"] is compat.Level.RISKY


@pytest.mark.parametrize(
    "text",
    [
        "",
        "a:1.35:containerd-2.2",
        "a:1.36:docker",
        "a:1.36:containerd-2.2:admin-pod-events-off",  # the option is CRI-O's
        "a:1.36:crio-1.34:kubeadm",  # kubeadm nodes run containerd
        "a:1.36:containerd-1.6:kubeadm",
        "a:1.37:containerd-2.2:kubeadm",  # kubeadm v1.36 joins kubelets up to its own minor
        "a:1.36:containerd-2.2:other",
        "a:1.36:containerd-2.2,a:1.37:containerd-2.2",
        "Upper:1.36:containerd-2.2",
        "a:1.36",
        ",".join(f"n{i}:1.36:containerd-2.2" for i in range(10)),
    ],
)
def test_bad_specs_are_refused(text: str) -> None:
    with pytest.raises(SpecError):
        parse(text)


def test_node_files_join_the_cluster_with_the_node_identity() -> None:
    specs = parse("a:1.36:containerd-2.2,b:1.36:crio-1.34:admin-pod-events-off,c:1.36:containerd-1.6")
    a, b, c = specs
    files = nf.node_files(a, specs, api_port=6443, machine_id="0" * 32)
    kubeconfig = yaml.safe_load(files[nf.KUBELET_KUBECONFIG].text)
    cluster = kubeconfig["clusters"][0]["cluster"]
    assert cluster["server"] == "https://172.16.77.1:6443"
    assert cluster["tls-server-name"] == "kubernetes"
    kubelet = yaml.safe_load(files["/etc/kubernetes/kubelet.yaml"].text)
    assert kubelet["containerRuntimeEndpoint"] == "unix:///run/containerd/containerd.sock"
    assert kubelet["failCgroupV1"] is False and kubelet["podCIDR"] == "10.244.1.0/24"
    assert kubelet["authorization"]["mode"] == "Webhook"  # the agent's token needs nodes/metrics
    cni = json.loads(files["/etc/cni/net.d/10-lab.conflist"].text)
    assert cni["plugins"][0]["ipam"]["ranges"] == [[{"subnet": "10.244.1.0/24", "gateway": "10.244.1.1"}]]
    net = files["/etc/systemd/system/lab-net.service"].text
    assert "ip route add 10.244.2.0/24 via 172.16.77.12" in net
    assert "ip route add 10.244.3.0/24 via 172.16.77.13" in net
    assert "10.244.1.0/24" not in net  # no route to its own subnet
    assert "dnat to 172.16.77.1:6443" in files["/etc/lab/kubernetes-service.nft"].text
    assert "restrict_oom_score_adj = true" in files["/etc/containerd/config.toml"].text
    assert "ExecStart=/usr/local/bin/containerd " in files["/etc/systemd/system/containerd.service"].text
    assert files["/usr/local/bin/lab-entrypoint"].mode == 0o755
    assert "/etc/crio/crio.conf" not in files

    crio = nf.node_files(b, specs, api_port=6443, machine_id="1" * 32)
    assert "containerd.service" not in "".join(k for k in crio if k.startswith("/etc/systemd"))
    assert nf.CRIO_ADMIN_DROPIN in crio and "enable_pod_events = false" in crio[nf.CRIO_ADMIN_DROPIN].text
    assert 'runtime_path = "/usr/local/bin/runc-lab"' in crio["/etc/crio/crio.conf"].text
    assert nf.node_links(b)["/etc/systemd/system/containerd.service"] == "/dev/null"
    assert "/etc/systemd/system/multi-user.target.wants/crio.service" in nf.node_links(b)
    plain_crio = nf.node_files(parse("x:1.36:crio-1.34")[0], specs, api_port=1, machine_id="2" * 32)
    assert nf.CRIO_ADMIN_DROPIN not in plain_crio

    debian = nf.node_files(c, specs, api_port=6443, machine_id="3" * 32)
    assert "version = 2" in debian["/etc/containerd/config.toml"].text
    assert "ExecStart=/usr/bin/containerd " in debian["/etc/systemd/system/containerd.service"].text


def test_every_node_pulls_from_the_labs_registry_over_plain_http() -> None:
    specs = parse("a:1.36:containerd-2.2,b:1.36:crio-1.34,c:1.36:containerd-1.6")
    a, b, c = (nf.node_files(s, specs, api_port=1, machine_id="0" * 32) for s in specs)
    hosts_toml = f"{nf.CONTAINERD_CERTS_D}/{REGISTRY}/hosts.toml"
    v3 = tomllib.loads(a["/etc/containerd/config.toml"].text)["plugins"]
    assert v3["io.containerd.cri.v1.images"]["registry"]["config_path"] == nf.CONTAINERD_CERTS_D
    v2 = tomllib.loads(c["/etc/containerd/config.toml"].text)["plugins"]
    assert v2["io.containerd.grpc.v1.cri"]["registry"]["config_path"] == nf.CONTAINERD_CERTS_D
    for files in (a, c):
        hosts = tomllib.loads(files[hosts_toml].text)
        assert hosts["server"] == f"http://{REGISTRY}" == "http://172.16.77.1:5000"
        assert hosts["host"][f"http://{REGISTRY}"]["capabilities"] == ["pull", "resolve"]
    assert hosts_toml not in b
    (registry,) = tomllib.loads(b["/etc/containers/registries.conf.d/50-lab-registry.conf"].text)["registry"]
    assert registry == {"location": REGISTRY, "insecure": True}


def test_runc_wrapper_clamps_what_this_machine_cannot_grant(tmp_path: Path) -> None:
    bundle = tmp_path
    caps = ["CAP_CHOWN", "CAP_SYS_RESOURCE", "CAP_SYS_ADMIN"]
    config = {"process": {"oomScoreAdj": -998, "capabilities": {"bounding": caps, "effective": caps[1:2]}},
              "linux": {"resources": {"hugepageLimits": [
        {"pageSize": "2MB", "limit": 0}, {"pageSize": "1GB", "limit": 0}]}}}  # fmt: skip
    (bundle / "config.json").write_text(json.dumps(config, indent="\t"))
    wrapper = bundle / "runc-lab"
    # The real wrapper, with runc replaced by `true` so only the edit runs.
    wrapper.write_text(nf.RUNC_WRAPPER.replace("exec /usr/sbin/runc", "exec true"))
    wrapper.chmod(0o755)
    subprocess.run([str(wrapper), "create", "--bundle", str(bundle), "id"], check=True)
    edited = json.loads((bundle / "config.json").read_text())
    assert edited["process"]["oomScoreAdj"] == 0
    assert edited["linux"]["resources"]["hugepageLimits"] == []
    bounding = int(next(ln.split()[1] for ln in Path("/proc/self/status").read_text().splitlines()
                        if ln.startswith("CapBnd:")), 16)  # fmt: skip
    if bounding >> 24 & 1:  # this machine grants CAP_SYS_RESOURCE: the wrapper leaves the list alone
        assert edited["process"]["capabilities"]["bounding"] == caps
    else:
        assert edited["process"]["capabilities"]["bounding"] == ["CAP_CHOWN", "CAP_SYS_ADMIN"]
        assert edited["process"]["capabilities"]["effective"] == []


def test_kubeadm_nodes_are_laid_out_as_the_packages_lay_them_out() -> None:
    specs = parse("k:1.36:containerd-2.2:kubeadm,s:1.36:containerd-1.7:kubeadm,p:1.36:containerd-1.7")
    k, s, p = specs
    assert k.kubeadm and s.kubeadm and not p.kubeadm and s.runtime is LabRuntime.CONTAINERD_17
    assert parse(",".join(x.to_text() for x in specs)) == specs
    boot = kubeadm.Bootstrap("172.16.77.1:6443", "abcdef.0123456789abcdef", "sha256:" + "0" * 64)
    with pytest.raises(ValueError, match="join configuration"):
        nf.node_files(k, specs, api_port=6443, machine_id="0" * 32)
    files = nf.node_files(
        k, specs, api_port=6443, machine_id="0" * 32, join_config=kubeadm.join_config(k, boot)
    )
    # The packages' files, the simulated kubeadm host's text: one source.
    assert files["/usr/lib/systemd/system/kubelet.service"].text == profiles.KUBELET_SERVICE
    dropin = files["/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf"].text
    assert "EnvironmentFile=-/var/lib/kubelet/kubeadm-flags.env" in dropin
    assert "ExecStart=/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS" in dropin and "--config-dir" not in dropin
    assert files["/etc/default/kubelet"].text == "KUBELET_EXTRA_ARGS=\n"
    # Nothing of the lab's own kubelet: kubeadm join writes config.yaml, kubelet.conf and ca.crt.
    assert not {
        "/etc/kubernetes/kubelet.yaml",
        nf.KUBELET_KUBECONFIG,
        "/etc/systemd/system/kubelet.service",
    } & set(files)
    links = nf.node_links(k)
    assert links["/etc/systemd/system/multi-user.target.wants/kubelet.service"] == profiles.KUBELET_UNIT
    join = yaml.safe_load(files[nf.JOIN_CONFIG].text)
    assert join["kind"] == "JoinConfiguration" and files[nf.JOIN_CONFIG].mode == 0o600
    assert join["discovery"]["bootstrapToken"]["caCertHashes"] == [boot.ca_cert_hash]
    assert join["nodeRegistration"]["kubeletExtraArgs"] == [{"name": "node-ip", "value": k.ip}]
    assert "SystemVerification" in join["nodeRegistration"]["ignorePreflightErrors"]
    # containerd 1.7: built into /usr/local/bin, the CRI plugin's version-2 configuration.
    c17 = nf.node_files(s, specs, api_port=6443, machine_id="1" * 32, join_config="x")
    assert "ExecStart=/usr/local/bin/containerd " in c17["/etc/systemd/system/containerd.service"].text
    assert 'plugins."io.containerd.grpc.v1.cri"' in c17["/etc/containerd/config.toml"].text


def test_kubeadm_init_configuration_and_ca_hash(tmp_path: Path) -> None:
    token = kubeadm.new_token()
    assert re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", token)
    init, cluster, kubelet = yaml.safe_load_all(kubeadm.init_config(6443, token))
    assert init["bootstrapTokens"][0]["token"] == token
    assert init["bootstrapTokens"][0]["groups"] == ["system:bootstrappers:kubeadm:default-node-token"]
    assert cluster["kubernetesVersion"] == "v1.36.4" and cluster["controlPlaneEndpoint"] == "172.16.77.1:6443"
    assert "certificatesDir" not in cluster  # the default: the kubelets' clientCAFile is /etc/kubernetes/pki
    assert kubelet["kind"] == "KubeletConfiguration" and "containerRuntimeEndpoint" not in kubelet
    assert kubelet["featureGates"] == kubeadm.SITE_FEATURE_GATES and kubelet["failCgroupV1"] is False
    ca = pki.create(tmp_path).ca_crt
    # As `openssl x509 -pubkey | openssl pkey -pubin -outform der | sha256sum` (kubeadm's documented recipe).
    der = subprocess.run(
        f"openssl x509 -in {ca} -pubkey -noout | openssl pkey -pubin -outform der",
        shell=True, capture_output=True, check=True,
    ).stdout  # fmt: skip
    assert kubeadm.ca_cert_hash(ca.read_bytes()) == "sha256:" + hashlib.sha256(der).hexdigest()
