"""Cluster-grade sweeps: many ``autotaccl tune`` processes, on many hosts, cooperating on one study.

* ``locks``: mutual exclusion in the shared storage (PostgreSQL advisory locks) or on the shared file
  system (POSIX ``lockf``): admitting trials one at a time, and leasing the hosts a measurement runs on.
* ``heartbeat``: storages with heartbeats, and a reaper that fails (and retries) trials of dead workers.
* ``loop``: the worker loop: exactly ``--trials`` counted trials across all workers, none run twice.
* ``outbox``: MLflow logging that survives an unreachable tracking server (JSON lines, replayed later).
"""
