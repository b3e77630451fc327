"""Install tooling: the CRD kustomization, `make deploy` (the dev overlay plus the operators run
from this checkout under their own ServiceAccounts), the exec credential plugin that gives them
those identities, and the Helm chart generated from the kustomize output. Not product code: the
operators never import it."""
