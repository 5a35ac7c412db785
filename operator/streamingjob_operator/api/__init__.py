"""The StreamingJob API: the CRD's types (spec, policies, status), the CRD rendered from them, and
the names and labels of a job's children. Imports nothing of the operator's.
"""
