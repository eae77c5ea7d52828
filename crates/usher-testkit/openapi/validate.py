"""Validates usher's API descriptions and real answers against them.

Run by `crates/usher-testkit/tests/browsers/openapi.rs` with the browser venv's Python (which has the
pinned `openapi-spec-validator` and `jsonschema`; see scripts/ensure-browser.sh). Reads one JSON
object on stdin:

    {"documents": {"<name>": <OpenAPI document>, ...},
     "samples": [{"document": "<name>", "path": "/admin/queues/{queue}", "method": "get",
                  "status": 200, "content_type": "application/json", "body": <JSON>}, ...]}

(`content_type` "" for an answer without content: only its status is checked.)

An optional `"requests"` list holds request bodies, as the docs' `curl` examples send them
(`crates/usher-testkit/tests/docs.rs`): `{"document", "path", "method", "at", "body"}`; each
must validate against the operation's `application/json` request body schema.

Each document must be a valid OpenAPI 3.1 document (openapi-spec-validator), every security
requirement must name a scheme the document defines, and each sample's body must validate
(JSON Schema 2020-12, the dialect of OpenAPI 3.1) against the schema the document gives for its
path, method, status and content type. Prints one line per problem, then `RESULT ok` or
`RESULT failed`; exit status 0 only when everything validates.
"""

import json
import sys

from jsonschema import Draft202012Validator
from openapi_spec_validator import validate


def security_problems(name, doc):
    defined = set(doc.get("components", {}).get("securitySchemes", {}))
    for path, item in doc.get("paths", {}).items():
        for method, op in item.items():
            if not isinstance(op, dict):
                continue
            for requirement in op.get("security", []):
                for scheme in requirement:
                    if scheme not in defined:
                        yield f"{name}: {method.upper()} {path} names undefined security scheme {scheme!r}"


def sample_problems(documents, s):
    where = f"{s['document']}: {s['method'].upper()} {s['path']} {s['status']} {s['content_type']}"
    doc = documents[s["document"]]
    op = doc.get("paths", {}).get(s["path"], {}).get(s["method"])
    if op is None:
        yield f"{where}: the document has no such operation"
        return
    response = op.get("responses", {}).get(str(s["status"]))
    if response is None:
        yield f"{where}: the document does not list this status (it lists {sorted(op.get('responses', {}))})"
        return
    if not s["content_type"]:
        if response.get("content"):
            yield f"{where}: answered without content, but the document describes content"
        return
    media = response.get("content", {}).get(s["content_type"])
    if media is None or "schema" not in media:
        yield f"{where}: no schema for this content type (the document has {sorted(response.get('content', {}))})"
        return
    # The schema, resolved against the document's components: `#/components/...` references
    # point into the same root.
    root = dict(media["schema"])
    root["components"] = doc.get("components", {})
    validator = Draft202012Validator(root)
    for error in validator.iter_errors(s["body"]):
        yield f"{where}: {error.message} at {list(error.absolute_path)} in {json.dumps(s['body'])[:300]}"


def request_problems(documents, r):
    where = f"{r['at']}: {r['method'].upper()} {r['path']}"
    op = documents[r["document"]].get("paths", {}).get(r["path"], {}).get(r["method"])
    if op is None:
        yield f"{where}: the document has no such operation"
        return
    media = op.get("requestBody", {}).get("content", {}).get("application/json")
    if media is None or "schema" not in media:
        yield f"{where}: sends a JSON body, but the operation takes none"
        return
    root = dict(media["schema"])
    root["components"] = documents[r["document"]].get("components", {})
    for error in Draft202012Validator(root).iter_errors(r["body"]):
        yield f"{where}: {error.message} at {list(error.absolute_path)} in {json.dumps(r['body'])[:300]}"


def main():
    given = json.load(sys.stdin)
    documents = given["documents"]
    problems = []
    for name, doc in documents.items():
        try:
            validate(doc)
        except Exception as e:  # the validator's errors have several types
            problems.append(f"{name}: not a valid OpenAPI document: {e}")
        problems.extend(security_problems(name, doc))
    checked = 0
    for s in given["samples"]:
        problems.extend(sample_problems(documents, s))
        checked += 1
    for r in given.get("requests", []):
        problems.extend(request_problems(documents, r))
        checked += 1
    for p in problems:
        print(p)
    print(f"checked {len(documents)} documents and {checked} answers and request bodies")
    print("RESULT " + ("failed" if problems else "ok"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
