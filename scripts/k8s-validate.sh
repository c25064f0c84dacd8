#!/usr/bin/env bash
# `just k8s-validate`: deploy/kubernetes/*.yaml against the Kubernetes OpenAPI schemas, strictly
# (an unknown or misspelt field fails, as `kubectl apply --validate=strict` would), for the oldest
# Kubernetes the Job needs (1.29: native sidecars, backoffLimitPerIndex) and the newest the
# validator knows. Installs kubernetes-validate with pip if it is missing. No cluster needed.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if ! command -v kubernetes-validate >/dev/null; then
    python3 -m pip install --quiet --disable-pip-version-check kubernetes-validate
    PATH="$PATH:$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))')"
fi
manifests=(deploy/kubernetes/*.yaml)
for version in 1.29 latest; do
    args=(--strict --quiet)
    [ "$version" = latest ] || args+=(--kubernetes-version "$version")
    kubernetes-validate "${args[@]}" "${manifests[@]}"
    echo "k8s-validate: ${manifests[*]} pass strict schemas of Kubernetes $version" >&2
done
