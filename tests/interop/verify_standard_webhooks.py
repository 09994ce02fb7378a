"""Verifies deliveries with the official `standardwebhooks` library.

Reads a JSON document from stdin: {"secrets": [...], "headers": {...}, "body_b64": "..."}
and prints one JSON object: for each secret, "ok" or the library's error, and the
same for the body with one byte changed (which must fail).
"""

import base64
import json
import sys

from standardwebhooks.webhooks import Webhook

doc = json.load(sys.stdin)
body = base64.b64decode(doc["body_b64"])
tampered = body[:-1] + bytes([body[-1] ^ 1])


def verify(secret, payload):
    try:
        Webhook(secret).verify(payload, doc["headers"], json_parse=False)
        return "ok"
    except Exception as e:  # the library's own error, reported to the test
        return f"{type(e).__name__}: {e}"


print(
    json.dumps(
        {
            "genuine": [verify(s, body) for s in doc["secrets"]],
            "tampered": [verify(s, tampered) for s in doc["secrets"]],
        }
    )
)
