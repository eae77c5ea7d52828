#!/usr/bin/env python3
"""Check deploy/ecs/ against what AWS documents, offline.

* Each task definition is validated against the `RegisterTaskDefinition` request shape of
  botocore's bundled ECS service model (the API's documented fields: unknown keys, missing
  required keys, types, minimums, enum values), i.e. what
  `aws ecs register-task-definition --cli-input-json file://...` accepts.
* The CloudFormation snippet is linted separately with cfn-lint (validate-deploy.sh); here the
  usher-specific numbers are cross-checked between the files: env var names the binaries
  really have, credentials only in `secrets`, stopTimeout >= the gateway's drain, ALB idle
  timeout above the keepalive bound, deregistration delay covering the drain, health checks
  on /readyz, /api/* and /q/* routed, ALB access logs off (they would log tickets).

Usage: check_ecs.py DIR   (prints one line per file, exits 1 on any problem)
"""
import json
import sys
from pathlib import Path

import botocore.session
from botocore.exceptions import ParamValidationError
from botocore.validate import validate_parameters

# From `usher-gateway --help` / `usher-dispatcher --help` (RUST_LOG is read by the logger).
KNOWN_ENV = {
    "usher-gateway": {
        "USHER_LISTEN", "USHER_REDIS_URL", "USHER_SERVER_ID", "USHER_TICKET_KEY",
        "USHER_KEEPALIVE_SECS", "USHER_RETRY_MS", "USHER_HEARTBEAT_MS", "USHER_MAX_CONNECTIONS",
        "USHER_DRAIN_DELAY_MS", "USHER_DRAIN_SECS", "USHER_WORKER_THREADS", "USHER_LOG_FORMAT",
        "USHER_TRUSTED_PROXY_HOPS", "USHER_PROXY_PROTOCOL", "USHER_IP_JOIN_RATE",
        "USHER_IP_JOIN_BURST", "USHER_IP_MAX_STREAMS", "USHER_IP_MAX_PLACES", "USHER_MAX_SOCKETS",
        "USHER_HEALTH_RESERVE_SOCKETS", "USHER_HEADER_TIMEOUT_SECS", "USHER_BODY_TIMEOUT_SECS",
        "USHER_IDLE_TIMEOUT_SECS", "USHER_IP_MAX_SOCKETS", "USHER_IPV6_PREFIX", "RUST_LOG",
    },
    "usher-dispatcher": {
        "USHER_LISTEN", "USHER_REDIS_URL", "USHER_TICK_MS", "USHER_JWT_KEY_FILE", "USHER_JWT_KEY",
        "USHER_ADMIN_TOKEN", "USHER_EXACT_POSITIONS", "USHER_REPLICA_ID", "USHER_LEASE_TTL_MS",
        "USHER_WORKER_THREADS", "USHER_HEADER_TIMEOUT_SECS", "USHER_BODY_TIMEOUT_SECS",
        "USHER_MAX_SOCKETS", "USHER_LOG_FORMAT", "RUST_LOG",
    },
}
CREDENTIALS = {"USHER_REDIS_URL", "USHER_TICKET_KEY", "USHER_JWT_KEY", "USHER_ADMIN_TOKEN"}
# The binaries' defaults, for settings a task definition leaves out.
DEFAULTS = {"USHER_KEEPALIVE_SECS": 15, "USHER_DRAIN_DELAY_MS": 2000, "USHER_DRAIN_SECS": 10}
GATEWAY_EXIT_BOUND_S = 5  # "The process exits at the latest 5 s after the window"
# Fargate task sizes: cpu units -> allowed memory (MiB).
FARGATE = {
    "256": {512, 1024, 2048},
    "512": set(range(1024, 4097, 1024)),
    "1024": set(range(2048, 8193, 1024)),
    "2048": set(range(4096, 16385, 1024)),
    "4096": set(range(8192, 30721, 1024)),
}


def enum_errors(value, shape, path):
    """botocore's validator skips enums; walk the shape and check them."""
    errs = []
    if shape.type_name == "structure" and isinstance(value, dict):
        for k, v in value.items():
            if k in shape.members:
                errs += enum_errors(v, shape.members[k], f"{path}.{k}")
    elif shape.type_name == "list" and isinstance(value, list):
        for i, v in enumerate(value):
            errs += enum_errors(v, shape.member, f"{path}[{i}]")
    elif shape.type_name == "string" and getattr(shape, "enum", None):
        if value not in shape.enum:
            errs.append(f"{path}: {value!r} is not one of {shape.enum}")
    return errs


def check_task_definition(path, shape):
    errs = []
    td = json.loads(path.read_text())
    try:
        validate_parameters(td, shape)
    except ParamValidationError as e:
        errs.append(str(e).replace("\n", "; "))
    errs += enum_errors(td, shape, "taskDefinition")
    if "FARGATE" in td.get("requiresCompatibilities", []):
        if int(td.get("memory", 0)) not in FARGATE.get(td.get("cpu"), set()):
            errs.append(f"cpu {td.get('cpu')} / memory {td.get('memory')} is not a Fargate size")
    drains = {}
    for c in td.get("containerDefinitions", []):
        binary = (c.get("command") or [""])[0]
        known = KNOWN_ENV.get(binary)
        if known is None:
            errs.append(f"{c.get('name')}: command {binary!r} is not an usher server")
            continue
        env = {e["name"]: e.get("value") for e in c.get("environment", [])}
        secrets = {s["name"] for s in c.get("secrets", [])}
        for name in sorted(set(env) | secrets):
            if name not in known:
                errs.append(f"{c['name']}: {binary} has no setting {name}")
        for name in sorted(set(env) & CREDENTIALS):
            errs.append(f"{c['name']}: {name} is a credential: put it in `secrets`, not `environment`")
        if "USHER_REDIS_URL" not in secrets:
            errs.append(f"{c['name']}: USHER_REDIS_URL must come from `secrets`")
        if binary == "usher-gateway":
            get = lambda k: float(env.get(k, DEFAULTS[k]))
            drain = get("USHER_DRAIN_DELAY_MS") / 1000 + get("USHER_DRAIN_SECS") + GATEWAY_EXIT_BOUND_S
            drains["drain"] = drain
            drains["keepalive"] = get("USHER_KEEPALIVE_SECS")
            stop = c.get("stopTimeout", 30)
            if stop < drain + 1:
                errs.append(f"{c['name']}: stopTimeout {stop} s < drain delay + window + 5 s "
                            f"({drain:g} s) + margin")
    return td, errs, drains


def check_alb(path, gw):
    errs = []
    t = json.loads(path.read_text())
    res = t.get("Resources", {})

    def attrs(kind, key):
        out = {}
        for r in res.values():
            if r.get("Type") == kind:
                for a in r["Properties"].get(key, []):
                    out[a["Key"]] = a["Value"]
        return out

    lb = attrs("AWS::ElasticLoadBalancingV2::LoadBalancer", "LoadBalancerAttributes")
    tg = attrs("AWS::ElasticLoadBalancingV2::TargetGroup", "TargetGroupAttributes")
    keepalive_bound = 1.5 * gw.get("keepalive", 15)
    idle = float(lb.get("idle_timeout.timeout_seconds", 60))
    if idle <= keepalive_bound:
        errs.append(f"ALB idle timeout {idle:g} s is not above the keepalive bound {keepalive_bound:g} s")
    if lb.get("access_logs.s3.enabled", "false") != "false":
        errs.append("ALB access logs would record ticket query strings: keep access_logs.s3.enabled false")
    if "deregistration_delay.timeout_seconds" not in tg:
        errs.append("target group: set deregistration_delay.timeout_seconds (default 300 s)")
    else:
        delay = float(tg["deregistration_delay.timeout_seconds"])
        if not gw.get("drain", 17) <= delay < 300:
            errs.append(f"deregistration delay {delay:g} s: want >= the gateway's drain "
                        f"({gw.get('drain', 17):g} s) and well below the 300 s default")
    for name, r in res.items():
        if r.get("Type") == "AWS::ElasticLoadBalancingV2::TargetGroup":
            if r["Properties"].get("HealthCheckPath") != "/readyz":
                errs.append(f"{name}: health check must be on /readyz")
    patterns = set()
    for r in res.values():
        if r.get("Type") == "AWS::ElasticLoadBalancingV2::ListenerRule":
            for cond in r["Properties"].get("Conditions", []):
                patterns.update(cond.get("PathPatternConfig", {}).get("Values", []))
    for want in ("/api/*", "/q/*"):
        if want not in patterns:
            errs.append(f"no listener rule routes {want} to the gateways")
    return errs


def main():
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).parent)
    shape = (botocore.session.get_session().get_service_model("ecs")
             .operation_model("RegisterTaskDefinition").input_shape)
    failed = False
    gw = {}
    for path in sorted(root.glob("*-task-definition.json")):
        td, errs, drains = check_task_definition(path, shape)
        gw.update(drains)
        failed |= bool(errs)
        print(f"  {path.name}: " + ("; ".join(errs) if errs else "ok (RegisterTaskDefinition shape, env, secrets, stopTimeout)"))
    alb = root / "alb.cfn.json"
    errs = check_alb(alb, gw)
    failed |= bool(errs)
    print(f"  {alb.name}: " + ("; ".join(errs) if errs else "ok (idle timeout, deregistration delay, /readyz, routes, access logs)"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
