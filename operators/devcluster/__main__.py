"""`python -m operators.devcluster build|up|down|status|run|nodes|kubeconfig`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from operators.devcluster import profiles
from operators.devcluster.build import build_all
from operators.devcluster.cluster import DevCluster
from operators.devcluster.errors import DevClusterError
from operators.devcluster.existing import ExistingCluster, byo_kubeconfig, byo_requested
from operators.devcluster.profiles import PROFILES


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m operators.devcluster",
        description="A real local Kubernetes control plane (etcd, kube-apiserver, "
        "kube-controller-manager, kwok) run as processes, no Docker.",
    )
    parser.add_argument("--state-dir", help="where PKI, data, logs and kubeconfig live")
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build and cache the binaries (first time ~9 min)")
    build.add_argument("--force", action="store_true", help="rebuild even when cached")
    for name, text in (("up", "start the cluster"), ("run", "up + CRDs + operators + samples")):
        cmd = sub.add_parser(name, help=text)
        cmd.add_argument("--profile", default="small", choices=sorted(PROFILES))
        cmd.add_argument("--nodes", type=int, help="override the profile's GPU node count")
        cmd.add_argument("--apiserver-port", type=int, default=0, help="default: a free port")
        cmd.add_argument("--etcd-port", type=int, default=0, help="default: a free port")
    nodes = sub.add_parser(
        "nodes", help="create a profile's fake nodes (for your own cluster with kwok: BYO=1)"
    )
    nodes.add_argument("--profile", default="small", choices=sorted(PROFILES))
    nodes.add_argument("--nodes", type=int, help="override the profile's GPU node count")
    sub.add_parser("down", help="stop every process and forget the cluster")
    sub.add_parser("status", help="print processes, ports and kubeconfig as JSON")
    sub.add_parser("kubeconfig", help="print the admin kubeconfig path")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    state_dir = None if args.state_dir is None else Path(args.state_dir)
    # The CLI starts a cluster to outlive it (`make cluster-down` stops it).
    cluster = DevCluster(state_dir, die_with_parent=False)
    try:
        if args.command == "nodes":
            target = ExistingCluster(byo_kubeconfig(), state_dir) if byo_requested() else cluster
            created = profiles.nodes_for(args.profile, args.nodes)
            target.create_nodes(created)
            print(f"devcluster: {len(created)} nodes of the {args.profile} profile created")
            return 0
        if byo_requested() and args.command in ("run", "down"):
            # Bring your own cluster: run the operators and samples against it; never start or
            # stop the cluster itself.
            byo = ExistingCluster(byo_kubeconfig(), state_dir)
            if args.command == "down":
                byo.down()
                print(f"devcluster: stopped the operators started against {byo.server}")
                return 0
            from operators.devcluster.demo import run_demo

            print(f"devcluster: using the cluster in {byo.kubeconfig} ({byo.server})")
            run_demo(byo)
            return 0
        if args.command == "build":
            build_all(force=args.force)
        elif args.command in ("up", "run"):
            state = cluster.up(
                profile=args.profile,
                nodes=args.nodes,
                apiserver_port=args.apiserver_port,
                etcd_port=args.etcd_port,
                log=lambda msg: print(f"devcluster: {msg}", flush=True),
            )
            if args.command == "run":
                from operators.devcluster.demo import run_demo

                run_demo(cluster)
            else:
                print(
                    f"\n{state.nodes} nodes Ready in {state.ready_seconds:.1f} s.\n"
                    f"  export KUBECONFIG={cluster.kubeconfig}\n"
                    "  kubectl get nodes -L topology.sluice.dev/spine,topology.sluice.dev/tor\n"
                    "  make cluster-down   # when done"
                )
        elif args.command == "down":
            cluster.down()
            print(f"devcluster: stopped ({cluster.state_dir})")
        elif args.command == "status":
            print(json.dumps(cluster.status(), indent=2))
        elif args.command == "kubeconfig":
            print(cluster.kubeconfig)
    except DevClusterError as exc:
        print(f"devcluster: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
