"""`python -m operators.install crds|deploy|undeploy|token|chart`.

Where `deploy`/`undeploy` act: the cluster named by $KUBECONFIG when SLUICE_BYO_CLUSTER=1 (bring
your own cluster, e.g. kind), else the local dev cluster (`make cluster-up`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from operators.devcluster.cluster import DevCluster
from operators.devcluster.errors import DevClusterError
from operators.devcluster.existing import ExistingCluster, byo_kubeconfig, byo_requested
from operators.install import generated, identity
from operators.install.kustomize import REPO


def _target(need_running: bool = True) -> tuple[Path, Path]:
    """(admin kubeconfig, state folder)."""
    if byo_requested():
        byo = ExistingCluster(byo_kubeconfig())
        return byo.kubeconfig, byo.state_dir
    cluster = DevCluster()
    if need_running and not cluster.running():
        raise DevClusterError(
            "the local dev cluster is not running",
            "`make cluster-up` first, or `make deploy BYO=1` for the cluster in $KUBECONFIG",
        )
    return cluster.kubeconfig, cluster.state_dir


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["token"]:
        return identity.main(args[1:])
    parser = argparse.ArgumentParser(prog="python -m operators.install")
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("generate", help="write the generated install files (make crds)")
    check.add_argument("--check", action="store_true", help="exit 1 if any is stale")
    sub.add_parser("deploy", help="apply the dev overlay; run the operators as their SAs")
    sub.add_parser("undeploy", help="stop the operators `deploy` started")
    sub.add_parser("token", help="exec credential plugin (see --help of `token`)")
    ns = parser.parse_args(args)
    if ns.command == "generate":
        if ns.check:
            for path in generated.stale():
                print(f"{path.relative_to(REPO)} is stale: run `make crds`", file=sys.stderr)
            return 1 if generated.stale() else 0
        for path in generated.write_all():
            print(f"wrote {path.relative_to(REPO)}")
        return 0
    from operators.install.deploy import Deployer

    try:
        admin, state_dir = _target(need_running=ns.command == "deploy")
        deployer = Deployer(admin, state_dir)
        if ns.command == "undeploy":
            deployer.stop()
            print("deploy: operators stopped (the applied objects stay; kubectl delete -k to go)")
            return 0
        running = deployer.run_operators(deployer.apply())
        print(
            f"\n{len(running)} operator(s) running under their own ServiceAccounts.\n"
            f"  export KUBECONFIG={admin}\n"
            "  kubectl get deploy,sa -n sluice-system\n"
            "  make undeploy   # stop them"
        )
    except (DevClusterError, RuntimeError) as exc:
        print(f"deploy: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
