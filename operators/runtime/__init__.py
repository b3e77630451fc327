"""Runtime adapters: kube clients, watch-fed caches, binder/evictor, leader election, metrics."""
