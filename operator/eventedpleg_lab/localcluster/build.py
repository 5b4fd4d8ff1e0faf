"""Build the local control plane's binaries from Go modules, pinned, into a cache outside the repo.

No container engine and no release downloads here: only the Go module proxy. So every binary is compiled:

- etcd from `go.etcd.io/etcd/server/v3` inside a wrapper module (its own go.mod has `replace` directives,
  so `go install ...@version` is refused);
- kube-apiserver, kube-controller-manager, kube-scheduler from `k8s.io/kubernetes` inside a wrapper module
  whose `replace` list pins every staging module to its published v0.X.Y. The list is generated from that
  release's own go.mod, so a new release that adds a staging module needs no change here;
- kwok and helm with `go install pkg@version` (their go.mods have no `replace`).

The real-node rig (eventedpleg_lab.realnode) builds its binaries here too, with the same techniques: two
kubelets (the staging-replace wrapper, one per version), containerd 2.2 + runc shim + ctr and crictl with
`go install`.
Those are versioned components (`ensure_component`), not looked up by bare binary name.

The cache is keyed by component and version (`<cache>/bin/<component>-<version>/`), so a second run only
checks that files exist. Binaries a user already has are honoured: $EVENTEDPLEG_BIN_DIR first, then
$KUBEBUILDER_ASSETS (envtest's layout), then the cache; only what is missing is built.

    python -m eventedpleg_lab.localcluster.build            # build everything missing, print the paths
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from eventedpleg_lab import periodic

# Pins. k8s v1.36.5 cannot be used: `go mod download` fails with "verifying go.mod: ... sum.golang.org/lookup
# ... 404" (the checksum database has no entry for it), so v1.36.4 is the newest that verifies.
ETCD_VERSION = "v3.6.16"
K8S_VERSION = "v1.36.4"
KWOK_VERSION = "v0.8.0"
HELM_VERSION = "v3.22.0"

ENV_CACHE = "EVENTEDPLEG_CACHE"
ENV_BIN_DIR = "EVENTEDPLEG_BIN_DIR"
ENV_KUBEBUILDER_ASSETS = "KUBEBUILDER_ASSETS"

Log = Callable[[str], None]  # where the lab's long steps say what they do (stderr by default)


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Component:
    """A group of binaries built by one Go invocation."""

    name: str
    version: str
    binaries: tuple[str, ...]
    estimate: str  # what a cold build costs on 2 cores, told to the user before it starts

    @property
    def key(self) -> str:
        return f"{self.name}-{self.version}"


ETCD = Component("etcd", ETCD_VERSION, ("etcd",), "~1 minute")
KUBERNETES = Component(
    "kubernetes",
    K8S_VERSION,
    ("kube-apiserver", "kube-controller-manager", "kube-scheduler"),
    "~10 minutes and ~2 GB of RAM",
)
KWOK = Component("kwok", KWOK_VERSION, ("kwok",), "~2 minutes")
HELM = Component("helm", HELM_VERSION, ("helm",), "~2 minutes")
COMPONENTS = (ETCD, KUBERNETES, KWOK, HELM)

# The real-node rig (docs/realnode.md): kubelet v1.36 (EventedPLEG stretches the relist to 300 s) and
# v1.37 (the narrowed k8s#139262 design), containerd 2.2 (go.mod without replace/exclude, several event
# subscribers).
KUBELET_136 = Component("kubelet", K8S_VERSION, ("kubelet",), "~10 minutes (~15 with a cold module cache)")
KUBELET_137 = Component("kubelet", "v1.37.2", ("kubelet",), "~10 minutes (~15 with a cold module cache)")
CONTAINERD = Component("containerd", "v2.2.9", ("containerd", "containerd-shim-runc-v2", "ctr"), "~4 minutes")
CRICTL = Component("crictl", "v1.36.0", ("crictl",), "~1 minute")
# The lab's kubeadm-joined nodes (docs/lab.md): kubeadm from the same k8s.io/kubernetes module and version
# as their kubelet; containerd 1.7 (the most deployed line, one event subscriber: containerd#7318). Its
# go.mod has an `exclude`, which `go install pkg@version` refuses, so it is built as the main module from a
# writable copy of the module (as CRI-O is).
KUBEADM_136 = Component("kubeadm", K8S_VERSION, ("kubeadm",), "~5 minutes (kubelet's modules cached)")
CONTAINERD_17 = Component(
    "containerd", "v1.7.35", ("containerd", "containerd-shim-runc-v2", "ctr"), "~5 minutes"
)
# Release tooling (hack/release.sh, hack/test.sh): actionlint checks the release workflow; syft writes the
# image's SBOM. Both with `go install`, like kwok and helm.
ACTIONLINT = Component("actionlint", "v1.7.12", ("actionlint",), "~1 minute")
SYFT = Component("syft", "v1.57.1", ("syft",), "~10 minutes and ~3 GB of RAM (a ~1 GB module download)")
RELEASE_TOOLS = (ACTIONLINT, SYFT)
# The lab's OCI registry (docs/lab.md): `crane registry serve` on the bridge address; `crane push` puts the
# image built from the Dockerfile into it by digest, as a release pushes it to a public registry.
CRANE = Component("crane", "v0.22.1", ("crane",), "~1 minute")
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")

# The tests' kstatus reader: ../kstatus/main.go around sigs.k8s.io/cli-utils/pkg/kstatus/status (what Flux
# computes health with). Keyed by the library's version and the source's hash, so an edit rebuilds it.
KSTATUS_SOURCE = Path(__file__).resolve().parents[1] / "kstatus" / "main.go"
CLI_UTILS_VERSION = "v0.37.2"
KSTATUS = Component(
    "kstatus",
    f"{CLI_UTILS_VERSION}-{hashlib.sha256(KSTATUS_SOURCE.read_bytes()).hexdigest()[:8]}",
    ("kstatus",),
    "~2 minutes",
)

# kwok v0.8.0 has no built-in stages any more (it exits "no stages found"); its module ships them as a
# kustomize tree. We copy the files `kustomize/stage/fast` resolves to, so the runtime needs no Go.
KWOK_STAGES_KUSTOMIZATION = "kustomize/stage/fast"


@dataclass
class Binaries:
    """Where each binary is, and the kwok stage files."""

    paths: dict[str, Path] = field(default_factory=dict)
    kwok_stages: list[Path] = field(default_factory=list)

    def __getitem__(self, name: str) -> Path:
        return self.paths[name]


class BuildError(RuntimeError):
    pass


def cache_dir() -> Path:
    return Path(os.environ.get(ENV_CACHE) or Path.home() / ".cache" / "eventedpleg").expanduser()


def _component_of(binary: str) -> Component:
    for comp in COMPONENTS:
        if binary in comp.binaries:
            return comp
    raise KeyError(f"no component builds {binary!r}")


def _user_dirs() -> list[Path]:
    return [
        Path(d).expanduser()
        for d in (os.environ.get(ENV_BIN_DIR), os.environ.get(ENV_KUBEBUILDER_ASSETS))
        if d
    ]


def _executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def locate(binary: str) -> Path | None:
    """The binary from the user's directories or our cache, without building."""
    for directory in _user_dirs():
        if _executable(directory / binary):
            return directory / binary
    cached = cache_dir() / "bin" / _component_of(binary).key / binary
    return cached if _executable(cached) else None


def component_dir(comp: Component) -> Path:
    return cache_dir() / "bin" / comp.key


def ensure_component(comp: Component, *, log: Log = _stderr, rebuild: bool = False) -> dict[str, Path]:
    """A versioned component's binaries from the cache, built (under the build lock) when missing."""

    def present() -> bool:
        return all(_executable(component_dir(comp) / b) for b in comp.binaries)

    if rebuild or not present():
        cache_dir().mkdir(parents=True, exist_ok=True)
        with build_lock(cache_dir() / ".build.lock", log):
            if rebuild or not present():
                _build(comp, log)
    return {b: component_dir(comp) / b for b in comp.binaries}


def kwok_stages_dir() -> Path:
    return cache_dir() / "bin" / KWOK.key / "stages"


def ensure(
    names: Sequence[str] = (*CONTROL_PLANE, "helm"), *, log: Log = _stderr, rebuild: bool = False
) -> Binaries:
    """Return every named binary, building (under a lock) those neither the user nor the cache has."""
    result = Binaries()
    missing: list[Component] = []
    for name in names:
        found = None if rebuild else locate(name)
        if found is None:
            comp = _component_of(name)
            if comp not in missing:
                missing.append(comp)
        else:
            result.paths[name] = found
    need_stages = "kwok" in names and (rebuild or not _stages_present())
    if missing or need_stages:
        cache_dir().mkdir(parents=True, exist_ok=True)
        with build_lock(cache_dir() / ".build.lock", log):
            for comp in missing:
                # Another process may have finished it while we waited for the lock.
                if not rebuild and all(locate(b) for b in comp.binaries):
                    continue
                _build(comp, log)
            if "kwok" in names and (rebuild or not _stages_present()):
                _extract_kwok_stages(log)
        for name in names:
            path = locate(name)
            if path is None:
                raise BuildError(f"{name} is still missing after the build")
            result.paths[name] = path
    if "kwok" in names:
        result.kwok_stages = sorted(kwok_stages_dir().glob("*.yaml"))
    return result


def _stages_present() -> bool:
    return any(kwok_stages_dir().glob("*.yaml"))


@contextlib.contextmanager
def build_lock(path: Path, log: Log) -> Iterator[None]:
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"[build] another build holds {path}; waiting for it")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# --- Go ------------------------------------------------------------------------------------------------


def _go_env() -> dict[str, str]:
    env = dict(os.environ)
    # GOTOOLCHAIN=local: never let a go.mod `toolchain` line (etcd's says go1.26.10) trigger a toolchain
    # download; the installed Go (>= 1.26.0, what every pinned go.mod asks) builds all of these.
    env["GOTOOLCHAIN"] = "local"
    env["CGO_ENABLED"] = "0"
    # -mod=mod: the wrapper modules have no go.sum committed; let go resolve and record sums as it goes.
    env["GOFLAGS"] = " ".join(filter(None, [env.get("GOFLAGS", ""), "-mod=mod", "-buildvcs=false"]))
    return env


def _go() -> str:
    go = shutil.which("go")
    if go is None:
        raise BuildError(
            "the Go toolchain (>= 1.26) is needed to build the local control plane; install it, or point "
            f"${ENV_BIN_DIR} at a directory holding {', '.join(CONTROL_PLANE)}"
        )
    return go


def _run(args: Sequence[str], *, cwd: Path, logfile: Path, capture: bool = False) -> str:
    """Run a go command, appending its output to logfile; on failure show the tail of the log."""
    with logfile.open("a") as out:
        out.write(f"\n$ {' '.join(args)}   (in {cwd})\n")
        out.flush()
        proc = subprocess.run(
            [_go(), *args],
            cwd=cwd,
            env=_go_env(),
            stdout=subprocess.PIPE if capture else out,
            stderr=out,
            text=True,
            check=False,
        )
    if proc.returncode != 0:
        tail = "\n".join(logfile.read_text().splitlines()[-25:])
        raise BuildError(
            f"`go {' '.join(args[:2])} ...` failed (exit {proc.returncode}); see {logfile}:\n{tail}"
        )
    return proc.stdout if capture else ""


def _download_json(module: str, *, cwd: Path, logfile: Path) -> dict[str, str]:
    data: dict[str, str] = json.loads(
        _run(["mod", "download", "-json", module], cwd=cwd, logfile=logfile, capture=True)
    )
    if data.get("Error"):
        raise BuildError(f"go mod download {module}: {data['Error']}")
    return data


def _ldflags_version(pkgs: Iterable[str], values: dict[str, str]) -> list[str]:
    return [f"-X {pkg}.{var}={val}" for pkg in pkgs for var, val in values.items()]


def _ticker(comp: Component, log: Log, every: float = 30.0) -> contextlib.AbstractContextManager[None]:
    """Print elapsed time while a long build runs, so nobody thinks it hangs."""
    start = time.monotonic()
    return periodic.every(
        every, lambda: log(f"[build]   {comp.key}: still building, {time.monotonic() - start:.0f}s elapsed")
    )


def _build(comp: Component, log: Log) -> None:
    root = cache_dir()
    final = root / "bin" / comp.key
    staging = root / "bin" / f".{comp.key}.partial"
    src = root / "src" / comp.key
    logfile = root / "logs" / f"build-{comp.key}.log"
    for directory in (staging.parent, src, logfile.parent):
        directory.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    logfile.write_text(f"build of {comp.key} started {time.ctime()}\n")
    log(
        f"[build] {comp.key} ({', '.join(comp.binaries)}): compiling from Go modules, a cold build takes "
        f"{comp.estimate} (cached afterwards in {final}); log: {logfile}"
    )
    start = time.monotonic()
    with _ticker(comp, log):
        _BUILDERS.get(comp.key, _BUILDERS[comp.name])(comp, src, staging, logfile)
    for binary in comp.binaries:
        if not _executable(staging / binary):
            raise BuildError(f"{comp.key}: the build produced no {binary}; see {logfile}")
    # Publish atomically: readers see either no directory or a complete one.
    shutil.rmtree(final, ignore_errors=True)
    staging.rename(final)
    log(f"[build] {comp.key}: done in {time.monotonic() - start:.0f}s")


def _wrapper_module(src: Path, logfile: Path) -> None:
    if not (src / "go.mod").exists():
        _run(["mod", "init", "example.invalid/eventedpleg-bin"], cwd=src, logfile=logfile)


def _build_etcd(comp: Component, src: Path, out: Path, logfile: Path) -> None:
    # server/go.mod carries `replace go.etcd.io/etcd/api/v3 => ../api` etc., so `go install @version` is
    # refused; as a dependency of a wrapper module those replaces are ignored and the published modules used.
    _wrapper_module(src, logfile)
    pkg = "go.etcd.io/etcd/server/v3"
    _run(["get", "-tool", f"{pkg}@{comp.version}"], cwd=src, logfile=logfile)
    # The main package is the module root, whose default binary name would be "server".
    _run(["build", "-trimpath", "-ldflags=-s -w", "-o", str(out / "etcd"), pkg], cwd=src, logfile=logfile)


def staging_replaces(kubernetes_go_mod: str) -> list[str]:
    """Module paths that k8s.io/kubernetes maps to ./staging/... (each must be pinned to its v0.X.Y)."""
    modules: list[str] = []
    for raw in kubernetes_go_mod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if line.startswith("replace "):
            line = line.removeprefix("replace ").strip()
        parts = line.split()
        if len(parts) == 3 and parts[1] == "=>" and parts[2].startswith("./staging/"):
            modules.append(parts[0])
    return modules


def godebug_lines(kubernetes_go_mod: str) -> list[str]:
    """`godebug k=v` settings of the release (a dependency's godebug lines do not apply to us)."""
    out: list[str] = []
    in_block = False
    for raw in kubernetes_go_mod.splitlines():
        line = raw.split("//", 1)[0].strip()
        if line == "godebug (":
            in_block = True
        elif in_block and line == ")":
            in_block = False
        elif in_block and "=" in line:
            out.append(line)
        elif line.startswith("godebug ") and "=" in line:
            out.append(line.removeprefix("godebug ").strip())
    return out


def _build_kubernetes(comp: Component, src: Path, out: Path, logfile: Path) -> None:
    # k8s.io/kubernetes requires its staging modules at v0.0.0 and maps them with replace => ./staging/...;
    # replaces of a dependency are ignored and v0.0.0 is not on the proxy, so we add our own replace to the
    # published tag v0.<minor>.<patch> for each (docs/realnode.md; kubernetes#79384).
    _wrapper_module(src, logfile)
    staging_version = "v0." + comp.version.removeprefix("v1.")
    info = _download_json(f"k8s.io/kubernetes@{comp.version}", cwd=src, logfile=logfile)
    kmod = Path(info["GoMod"]).read_text()
    edits = [f"-replace={m}={m}@{staging_version}" for m in staging_replaces(kmod)]
    edits += [f"-godebug={kv}" for kv in godebug_lines(kmod)]
    if not edits:
        raise BuildError(f"found no staging replace directives in k8s.io/kubernetes@{comp.version}'s go.mod")
    _run(["mod", "edit", *edits], cwd=src, logfile=logfile)
    cmds = [f"k8s.io/kubernetes/cmd/{b}" for b in comp.binaries]
    _run(["get", "-tool", *(f"{c}@{comp.version}" for c in cmds)], cwd=src, logfile=logfile)
    minor = comp.version.split(".")[1]
    # Version stamping as upstream's hack/lib/version.sh does; without it the binaries report v0.0.0.
    stamp = {"gitVersion": comp.version, "gitMajor": "1", "gitMinor": minor, "gitTreeState": "clean"}
    ld = [
        "-s",
        "-w",
        *_ldflags_version(("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"), stamp),
    ]
    # One `go build` of several mains writes one executable per package into the directory (-o dir/).
    _run(
        ["build", "-trimpath", "-pgo=off", f"-ldflags={' '.join(ld)}", "-o", f"{out}/", *cmds],
        cwd=src,
        logfile=logfile,
    )


def _install(
    pkg: str,
    version: str,
    ldflags: Sequence[str],
    *,
    out: Path,
    src: Path,
    logfile: Path,
    more: Sequence[str] = (),
    tags: Sequence[str] = (),
) -> None:
    """`go install pkg@version` with GOBIN=out (works for modules without replace directives); `more` are
    further packages of the same module and version."""
    args = ["install", "-trimpath", f"-ldflags={' '.join(['-s', '-w', *ldflags])}"]
    args += [f"-tags={','.join(tags)}"] if tags else []
    args += [f"{p}@{version}" for p in (pkg, *more)]
    with logfile.open("a") as fh:
        fh.write(f"\n$ GOBIN={out} go {' '.join(args)}\n")
        fh.flush()
        env = _go_env()
        env["GOBIN"] = str(out)
        proc = subprocess.run([_go(), *args], cwd=src, env=env, stdout=fh, stderr=fh, check=False)
    if proc.returncode != 0:
        tail = "\n".join(logfile.read_text().splitlines()[-25:])
        raise BuildError(
            f"`go install {pkg}@{version}` failed (exit {proc.returncode}); see {logfile}:\n{tail}"
        )


def _build_kwok(comp: Component, src: Path, out: Path, logfile: Path) -> None:
    # Same -X flags as kwok's hack/releases.sh.
    ld = [f"-X sigs.k8s.io/kwok/pkg/consts.Version={comp.version}"]
    _install("sigs.k8s.io/kwok/cmd/kwok", comp.version, ld, out=out, src=src, logfile=logfile)


def _build_helm(comp: Component, src: Path, out: Path, logfile: Path) -> None:
    # As helm's Makefile: without these, `helm version` says v3.22 and offline `helm template` assumes a
    # Kubernetes v1.20 cluster (pkg/chartutil/capabilities.go).
    k8s_minor = K8S_VERSION.split(".")[1]
    ld = [
        f"-X helm.sh/helm/v3/internal/version.version={comp.version}",
        "-X helm.sh/helm/v3/internal/version.gitTreeState=clean",
        "-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1",
        f"-X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor={k8s_minor}",
        "-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1",
        f"-X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor={k8s_minor}",
    ]
    _install("helm.sh/helm/v3/cmd/helm", comp.version, ld, out=out, src=src, logfile=logfile)


def _build_containerd(comp: Component, src: Path, out: Path, logfile: Path) -> None:
    # docs/realnode.md: CGO_ENABLED=0 (btrfs needs cgo and is then left out), the shim built the same
    # way as the release Makefile's SHIM_CGO_ENABLED=0; urfave_cli_no_docs drops the man-page generator.
    # The version stamp is what CRI's Version reports, i.e. the Node's containerRuntimeVersion.
    mod = "github.com/containerd/containerd/v2"
    ld = [f"-X {mod}/version.Version={comp.version}"]
    cmds = [f"{mod}/cmd/{b}" for b in comp.binaries]
    tags = ["urfave_cli_no_docs"]
    _install(cmds[0], comp.version, ld, out=out, src=src, logfile=logfile, more=cmds[1:], tags=tags)


def _build_containerd_17(comp: Component, src: Path, out: Path, logfile: Path) -> None:
    # github.com/containerd/containerd (no /v2) v1.7.x: `exclude github.com/mitchellh/osext ...` in its go.mod
    # makes `go install @version` fail, so build inside a writable copy of the module, with its go.sum.
    # CGO_ENABLED=0 as for 2.2: no_btrfs leaves out the cgo-only btrfs snapshotter, as its Makefile's
    # BUILDTAGS do on hosts without btrfs headers.
    info = _download_json(f"github.com/containerd/containerd@{comp.version}", cwd=src, logfile=logfile)
    tree = src / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    shutil.copytree(info["Dir"], tree)
    subprocess.run(["chmod", "-R", "u+w", str(tree)], check=True)
    mod = "github.com/containerd/containerd"
    ld = ["-s", "-w", f"-X {mod}/version.Version={comp.version}"]
    tags = "urfave_cli_no_docs,no_btrfs"
    _run(
        ["build", "-trimpath", f"-ldflags={' '.join(ld)}", f"-tags={tags}", "-o", f"{out}/",
         *(f"./cmd/{b}" for b in comp.binaries)],
        cwd=tree,
        logfile=logfile,
    )  # fmt: skip


def _build_crictl(comp: Component, src: Path, out: Path, logfile: Path) -> None:
    # Not `go install pkg@version`: that also reads the module's version list to report deprecations, which
    # our module proxy refuses for cri-tools (403); `go get` of the exact version in a wrapper does not.
    _wrapper_module(src, logfile)
    pkg = "sigs.k8s.io/cri-tools/cmd/crictl"
    _run(["get", "-tool", f"{pkg}@{comp.version}"], cwd=src, logfile=logfile)
    ld = ["-s", "-w", f"-X sigs.k8s.io/cri-tools/pkg/version.Version={comp.version}"]
    _run(
        ["build", "-trimpath", f"-ldflags={' '.join(ld)}", "-o", str(out / "crictl"), pkg],
        cwd=src,
        logfile=logfile,
    )


def _build_kstatus(comp: Component, src: Path, out: Path, logfile: Path) -> None:
    _wrapper_module(src, logfile)
    shutil.copyfile(KSTATUS_SOURCE, src / "main.go")
    _run(["get", f"sigs.k8s.io/cli-utils@{CLI_UTILS_VERSION}"], cwd=src, logfile=logfile)
    _run(["build", "-trimpath", "-ldflags=-s -w", "-o", str(out / "kstatus"), "."], cwd=src, logfile=logfile)


def _build_actionlint(comp: Component, src: Path, out: Path, logfile: Path) -> None:
    # As actionlint's own release build: the version it prints comes from this -X flag.
    ld = [f"-X github.com/rhysd/actionlint.version={comp.version}"]
    pkg = "github.com/rhysd/actionlint/cmd/actionlint"
    _install(pkg, comp.version, ld, out=out, src=src, logfile=logfile)


def _build_syft(comp: Component, src: Path, out: Path, logfile: Path) -> None:
    # As syft's goreleaser build: the version it writes into each SBOM's creator comes from this -X flag.
    ld = [f"-X main.version={comp.version.lstrip('v')}"]
    _install("github.com/anchore/syft/cmd/syft", comp.version, ld, out=out, src=src, logfile=logfile)


def _build_crane(comp: Component, src: Path, out: Path, logfile: Path) -> None:
    # As the module's release build (cmd/crane/cmd/version.go): the version `crane version` prints.
    ld = [f"-X github.com/google/go-containerregistry/cmd/crane/cmd.Version={comp.version}"]
    pkg = "github.com/google/go-containerregistry/cmd/crane"
    _install(pkg, comp.version, ld, out=out, src=src, logfile=logfile)


_BUILDERS: dict[str, Callable[[Component, Path, Path, Path], None]] = {
    "kstatus": _build_kstatus,
    "etcd": _build_etcd,
    "kubernetes": _build_kubernetes,
    # The same staging-replace wrapper builds a kubelet (its binaries name the cmd/ packages).
    "kubelet": _build_kubernetes,
    "kubeadm": _build_kubernetes,
    "containerd": _build_containerd,
    CONTAINERD_17.key: _build_containerd_17,  # by key: another module than containerd 2.x's
    "crictl": _build_crictl,
    "kwok": _build_kwok,
    "helm": _build_helm,
    "actionlint": _build_actionlint,
    "syft": _build_syft,
    "crane": _build_crane,
}


# --- kwok stages -----------------------------------------------------------------------------------------


def kustomize_files(directory: Path) -> list[Path]:
    """The resource files a kustomization.yaml pulls in, recursively (kwok's stage trees use only
    `resources:`; anything else would need real kustomize, so it is refused)."""
    kfile = directory / "kustomization.yaml"
    doc = yaml.safe_load(kfile.read_text()) or {}
    unsupported = set(doc) - {"apiVersion", "kind", "resources"}
    if unsupported:
        raise BuildError(f"{kfile}: unsupported kustomize fields {sorted(unsupported)}")
    files: list[Path] = []
    for entry in doc.get("resources", []):
        target = (directory / entry).resolve()
        files.extend(kustomize_files(target) if target.is_dir() else [target])
    return files


def _extract_kwok_stages(log: Log) -> None:
    src = cache_dir() / "src" / KWOK.key
    src.mkdir(parents=True, exist_ok=True)
    logfile = cache_dir() / "logs" / f"stages-{KWOK.key}.log"
    logfile.parent.mkdir(parents=True, exist_ok=True)
    _wrapper_module(src, logfile)
    log(f"[build] kwok {KWOK.version}: copying the stages of {KWOK_STAGES_KUSTOMIZATION} from the module")
    info = _download_json(f"sigs.k8s.io/kwok@{KWOK.version}", cwd=src, logfile=logfile)
    files = kustomize_files(Path(info["Dir"]) / KWOK_STAGES_KUSTOMIZATION)
    dest = kwok_stages_dir()
    partial = dest.with_name("stages.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for index, path in enumerate(files):
        # The module cache is read-only; copy the contents, not the mode.
        (partial / f"{index:02d}-{path.name}").write_text(path.read_text())
    shutil.rmtree(dest, ignore_errors=True)
    partial.rename(dest)


def main(argv: Sequence[str] | None = None) -> int:
    import argparse  # noqa: PLC0415 - only the command line needs it

    parser = argparse.ArgumentParser(description="Build (or find) the local control plane's binaries.")
    parser.add_argument("--rebuild", action="store_true", help="ignore the cache and user directories")
    args = parser.parse_args(argv)
    start = time.monotonic()
    try:
        found = ensure(rebuild=args.rebuild)
    except BuildError as exc:
        _stderr(f"error: {exc}")
        return 1
    for name, path in found.paths.items():
        print(f"{name:24} {path}")
    print(f"{'kwok stages':24} {kwok_stages_dir()}")
    _stderr(f"[build] ready in {time.monotonic() - start:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
