"""A validating admission webhook that refuses every Pod, as Pod Security
admission refuses a Pod that breaks the namespace's profile, for
tests/cluster-tests/tests/pod_start.rs: the Job controller then records
FailedCreate and no Pod ever exists. Dry-run creates are refused the same
way (it has no side effects).

Usage: python3 deny_pods.py PORT CERT KEY  (HTTPS, AdmissionReview v1).
"""

import admission_server

MESSAGE = ('violates PodSecurity "restricted:latest" (a stand-in webhook): '
           'this namespace admits no Pods')


def respond(request):
    return {"allowed": False, "status": {"code": 403, "reason": "Forbidden", "message": MESSAGE}}


if __name__ == "__main__":
    admission_server.main(respond)
