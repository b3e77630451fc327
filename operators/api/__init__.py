"""Typed models of every Sluice kind; the CRDs in crds/ are generated from them."""
