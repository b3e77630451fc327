"""A real local Kubernetes control plane for tests and demos, run as plain processes.

etcd, kube-apiserver, kube-controller-manager (and kube-scheduler, as a benchmark yardstick) are
built from the Go module proxy at pinned versions, kwok fakes the nodes and pod lifecycles. No
Docker. See docs/devcluster.md.
"""
