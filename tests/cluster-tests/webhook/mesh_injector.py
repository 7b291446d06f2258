"""A mutating admission webhook that does to Pods and Jobs what real
clusters' admission does, for tests/cluster-tests/tests/admission.rs:

- every Pod gets, like a service mesh in its CNI mode, an init container
  (`mesh-init`), a proxy sidecar (`mesh-proxy`, which exits after a moment:
  the local node has no native sidecars) with resources and a Pod-local
  volume, and a label; the mesh opt-out label is deliberately ignored, as a
  misconfigured mesh would; containers without resources get some, as a
  LimitRange or a policy engine gives them;
- every Job labelled for a Kueue LocalQueue is created suspended, as Kueue's
  webhook does until the queue admits it (the test then admits it).

Usage: python3 mesh_injector.py PORT CERT KEY  (HTTPS, AdmissionReview v1).
"""

import base64
import json

import admission_server

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


def pod_patch(pod):
    spec = pod.get("spec", {})
    ops = []
    init = {"name": "mesh-init", "image": "local/shell", "command": ["sh", "-c", "exit 0"]}
    proxy = {
        "name": "mesh-proxy",
        "image": "local/shell",
        "command": ["sh", "-c", "sleep 1"],
        "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}},
        "volumeMounts": [{"name": "mesh-data", "mountPath": "/var/run/mesh"}],
    }
    if spec.get("initContainers"):
        ops.append({"op": "add", "path": "/spec/initContainers/-", "value": init})
    else:
        ops.append({"op": "add", "path": "/spec/initContainers", "value": [init]})
    # Like a LimitRange or a policy engine: resources for containers without any.
    for index, container in enumerate(spec.get("containers", [])):
        if not container.get("resources"):
            limits = {"limits": {"cpu": "2", "memory": "256Mi"}, "requests": {"cpu": "10m", "memory": "16Mi"}}
            ops.append({"op": "add", "path": f"/spec/containers/{index}/resources", "value": limits})
    ops.append({"op": "add", "path": "/spec/containers/-", "value": proxy})
    volume = {"name": "mesh-data", "emptyDir": {}}
    if spec.get("volumes"):
        ops.append({"op": "add", "path": "/spec/volumes/-", "value": volume})
    else:
        ops.append({"op": "add", "path": "/spec/volumes", "value": [volume]})
    if pod.get("metadata", {}).get("labels"):
        ops.append({"op": "add", "path": "/metadata/labels/mesh.example.com~1injected", "value": "true"})
    else:
        ops.append({"op": "add", "path": "/metadata/labels", "value": {"mesh.example.com/injected": "true"}})
    return ops


def job_patch(job):
    labels = job.get("metadata", {}).get("labels") or {}
    if QUEUE_LABEL not in labels:
        return []
    return [{"op": "add", "path": "/spec/suspend", "value": True}]


def respond(request):
    kind = request["kind"]["kind"]
    obj = request["object"]
    ops = pod_patch(obj) if kind == "Pod" else job_patch(obj) if kind == "Job" else []
    response = {"allowed": True}
    if ops:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
    return response


if __name__ == "__main__":
    admission_server.main(respond)
