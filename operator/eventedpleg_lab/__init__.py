"""The lab around evented-pleg-operator (distribution evented-pleg-lab): what develops, demonstrates and tests
the product but never runs in the image.

- localcluster/  a real control plane here (etcd, kube-apiserver, kcm, scheduler, kwok), built from source
- realnode/      a real kubelet + containerd rig, for the agent's tests and the benefit benchmark
- sim/           simulated node hosts (kubelet, CRI-O, containerd, journal) following the real rules, and a
                 pure model cluster (rolloutworld, agentmodel) for the planner's property tests and bench/
- demo/          the demo and the rollout harness: operator process, simulated and protocol-only agents
- kube/          the lab's Kubernetes API adapter (kwok fake nodes, ServiceAccount tokens)
- cli/           the lab's `eventedpleg` commands: cluster, demo, realnode, sim-agent
"""
