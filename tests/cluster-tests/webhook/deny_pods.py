"""A validating admission webhook that refuses every Pod, as Pod Security
admission refuses a Pod that breaks the namespace's profile, for
tests/cluster-tests/tests/pod_start.rs: the Job controller then records
FailedCreate and no Pod ever exists. Dry-run creates are refused the same
way (it has no side effects).

Usage: python3 deny_pods.py PORT CERT KEY  (HTTPS, AdmissionReview v1).
"""

import http.server
import json
import ssl
import sys

MESSAGE = ('violates PodSecurity "restricted:latest" (a stand-in webhook): '
           'this namespace admits no Pods')


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        request = json.loads(self.rfile.read(length))["request"]
        response = {"uid": request["uid"], "allowed": False,
                    "status": {"code": 403, "reason": "Forbidden", "message": MESSAGE}}
        body = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                           "response": response}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    port, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print("listening", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
