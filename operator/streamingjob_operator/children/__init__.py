"""A job's children from pure builders (driver pod, executor template, ConfigMaps, Service, RBAC,
PDB, cleanup Job) and the validation that a spec can run, which dry-builds them. No I/O; imports
`rules` and `api`.
"""
