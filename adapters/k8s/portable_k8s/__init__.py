"""portable's Kubernetes adapter: ``k8s://`` launches batch/v1 Jobs (see :mod:`portable_k8s.jobs`)."""
